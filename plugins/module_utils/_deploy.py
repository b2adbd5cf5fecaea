# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side apply: ComposeHost (``compose.up``) and DockerHost (``docker.run``).

The engines run ON the target host (the module is shipped there by Ansible). They refuse to report
success from any other host: the target identity's endpoint must name this host. Docker and
Compose are reached only through :class:`DockerCli` (argv + JSON). Request parsing, convergence,
evidence shaping and ``changed`` decisions are pure functions; the engines are thin sequences of
phases around them. Standard library only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import socket
import time

from ansible_collections.stellaops.runtime.plugins.module_utils import _hooks, _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils._artifacts import (
    build_apply_manifest, lock_manifest_hashes, verify_artifact_set)
from ansible_collections.stellaops.runtime.plugins.module_utils._canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils._docker_cli import (
    DockerCli, parse_ip_addresses, repo_digests_contain)
from ansible_collections.stellaops.runtime.plugins.module_utils._fsutil import (
    atomic_write, project_lock, read_bytes, remove_stale_temps)
from ansible_collections.stellaops.runtime.plugins.module_utils._imageref import parse_image_ref

COMPOSE_PHASES = ("write_artifacts", "pre_deploy_hooks", "compose_pull", "compose_up", "inspect_services",
                  "write_sticker", "post_deploy_hooks")
DOCKER_PHASES = ("pull_image", "pre_deploy_hooks", "prepare_container", "inspect_container", "post_deploy_hooks")
# High-level product phases and the implementation phases that make them up.
DEPLOYMENT_PHASES = (
    ("prepare", ("write_artifacts",)),
    ("pre-deploy", ("pre_deploy_hooks",)),
    ("deploy", ("compose_pull", "compose_up", "pull_image", "prepare_container")),
    ("verify", ("inspect_services", "inspect_container")),
    ("promote", ("write_sticker",)),
    ("post-deploy", ("post_deploy_hooks",)),
)
COMPOSE_UP_KEYS = ("ProjectName", "ComposeLock", "VersionSticker", "ApplyManifest", "PullImages", "BackupExisting",
                   "Hooks", "WorkDirectory", "ManifestHash", "Target", "Variables")
COMPOSE_UP_REQUIRED = ("ProjectName", "ComposeLock", "VersionSticker", "PullImages", "BackupExisting", "Target")
DOCKER_RUN_KEYS = ("Image", "Name", "PullImage", "Hooks", "Labels", "Environment", "Ports", "Config", "WorkDirectory",
                   "ManifestHash", "Target", "Variables", "EnvFile")
DOCKER_RUN_REQUIRED = ("Image", "Name", "PullImage", "Target")
TARGET_KEYS = ("Id", "Name", "Type", "Endpoint", "ExecutionMode")
REQUIRED_STELLA_LABELS = ("stella.manifest.hash", "stella.target.id", "stella.target.name", "stella.target.type",
                          "stella.target.endpoint", "stella.execution.mode")
LOCAL_ENDPOINTS = ("local", "localhost", "127.0.0.1", "::1", "[::1]")
DEFAULT_WORK_DIRECTORY = "/var/lib/stella/projects"
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


# --------------------------------------------------------------------------- requests (pure)

def _bad(message):
    return StellaError("invalid_payload", message, phase="validate_payload")


def _check_keys(payload, allowed, required, what):
    if not isinstance(payload, dict):
        raise _bad("%s payload must be an object, got %s" % (what, type(payload).__name__))
    unknown = sorted(set(payload) - set(allowed))
    if unknown:
        raise _bad("%s payload has unknown key(s) %s; allowed keys (case-exact): %s" % (
            what, ", ".join(unknown), ", ".join(allowed)))
    missing = [key for key in required if key not in payload]
    if missing:
        raise _bad("%s payload lacks required key(s) %s" % (what, ", ".join(missing)))


def normalize_target(target, what="Target"):
    """Target context from the payload's ``Target`` (Id, Name, ...) or the option (id, name, ...)."""
    if not isinstance(target, dict):
        raise _bad("%s must be an object with %s" % (what, ", ".join(TARGET_KEYS)))
    out = {}
    for key in TARGET_KEYS:
        lower = key[0].lower() + key[1:]
        value = target.get(key, target.get(lower))
        if not isinstance(value, str) or not value:
            raise _bad("%s.%s is required and must be a non-empty string" % (what, key))
        out[lower] = value
    extra = sorted(set(target) - set(TARGET_KEYS) - {k[0].lower() + k[1:] for k in TARGET_KEYS})
    if extra:
        raise _bad("%s has unknown key(s) %s" % (what, ", ".join(extra)))
    return out


def _text(value, key):
    if not isinstance(value, str) or not value:
        raise _bad("%s must be a non-empty string" % key)
    return value


def _bool(value, key):
    if not isinstance(value, bool):
        raise _bad("%s must be a boolean, got %r" % (key, value))
    return value


def compose_request_from_payload(payload, overrides=None):
    """Normalize a verbatim ``compose.up`` task payload (contract key names, case-exact)."""
    _check_keys(payload, COMPOSE_UP_KEYS, COMPOSE_UP_REQUIRED, "compose.up")
    overrides = overrides or {}
    work = payload.get("WorkDirectory") or overrides.get("work_directory")
    if not work:
        raise _bad("compose.up payload lacks WorkDirectory and no work_directory option was given")
    request = {
        "project_name": _text(payload["ProjectName"], "ProjectName"),
        "compose_lock": _text(payload["ComposeLock"], "ComposeLock"),
        "version_sticker": _text(payload["VersionSticker"], "VersionSticker"),
        "apply_manifest": payload.get("ApplyManifest"),
        "pull_images": _bool(payload["PullImages"], "PullImages"),
        "backup_existing": _bool(payload["BackupExisting"], "BackupExisting"),
        "hooks": _hooks.normalize_hooks(payload.get("Hooks") or []),
        "work_directory": _text(work, "WorkDirectory"),
        "manifest_hash": payload.get("ManifestHash"),
        "target": normalize_target(payload["Target"]),
        "variables": payload.get("Variables", {}),
    }
    if request["variables"] is None:
        request["variables"] = {}
    if not isinstance(request["variables"], dict):
        raise _bad("Variables must be an object")
    if request["apply_manifest"] is not None:
        _text(request["apply_manifest"], "ApplyManifest")
    return request


def compose_request_from_options(params):
    """Normalize the snake_case module options into the same request shape."""
    for key in ("project_name", "compose_lock", "version_sticker", "target"):
        if not params.get(key):
            raise _bad("option %s is required when payload is not given" % key)
    return {
        "project_name": params["project_name"],
        "compose_lock": params["compose_lock"],
        "version_sticker": params["version_sticker"],
        "apply_manifest": params.get("apply_manifest"),
        "pull_images": params.get("pull_images", True) is not False,
        "backup_existing": params.get("backup_existing", True) is not False,
        "hooks": _hooks.normalize_hooks(params.get("hooks") or []),
        "work_directory": params.get("work_directory") or DEFAULT_WORK_DIRECTORY,
        "manifest_hash": params.get("manifest_hash"),
        "target": normalize_target(params["target"], "target"),
        "variables": {},
    }


def check_artifacts(request, env_bytes=None):
    """Pure consistency checks of the artifact set before any change.

    Returns ``(lock_bytes, sticker_bytes, manifest_bytes, sticker, manifest_hash)``; the apply
    manifest is built here when the request carries none, else verified byte for byte.
    """
    lock = request["compose_lock"].encode("utf-8")
    sticker_bytes = request["version_sticker"].encode("utf-8")
    try:
        sticker = json.loads(sticker_bytes)
    except ValueError as exc:
        raise StellaError("artifact_invalid", "VersionSticker is not JSON: %s" % exc, phase="validate_payload")
    if not isinstance(sticker, dict):
        raise StellaError("artifact_invalid", "VersionSticker must be a JSON object", phase="validate_payload")
    mhash = sticker.get("manifestHash")
    problems = []
    if sticker.get("composeHash") != sha256_bytes(lock):
        problems.append("sticker composeHash %s != sha256 of the lock %s" % (
            sticker.get("composeHash"), sha256_bytes(lock)))
    labels = lock_manifest_hashes(lock)
    if labels != [mhash]:
        problems.append("lock stella.manifest.hash labels %s != sticker manifestHash %s" % (labels, mhash))
    if request.get("manifest_hash") and request["manifest_hash"] != mhash:
        problems.append("ManifestHash %s != sticker manifestHash %s" % (request["manifest_hash"], mhash))
    recorded_target = sticker.get("target")
    wanted_target = dict(request["target"], endpoint=redact_url(request["target"]["endpoint"]))
    if isinstance(recorded_target, dict) and recorded_target != wanted_target:
        problems.append("Target %s differs from the sticker's target %s" % (
            json.dumps(request["target"], sort_keys=True), json.dumps(recorded_target, sort_keys=True)))
    if sticker.get("projectName") != request["project_name"]:
        problems.append("sticker projectName %r != ProjectName %r" % (
            sticker.get("projectName"), request["project_name"]))
    if problems:
        raise StellaError("artifact_hash_mismatch", "; ".join(problems), phase="validate_payload",
                          evidence={"problems": problems})
    artifacts = {_revisions.LOCK_FILE: lock, _revisions.STICKER_FILE: sticker_bytes}
    if env_bytes is not None:
        artifacts[_revisions.ENV_FILE] = env_bytes
    if request.get("apply_manifest"):
        manifest_bytes = request["apply_manifest"].encode("utf-8")
    else:
        manifest_bytes = pretty_json(build_apply_manifest(request["project_name"], mhash, artifacts))
    problems = verify_artifact_set(manifest_bytes, artifacts if env_bytes is not None else dict(
        artifacts, **{_revisions.ENV_FILE: None}), request["project_name"], mhash)
    # An env artifact listed in the manifest but not supplied may already be on disk: checked later.
    problems = [p for p in problems if not (env_bytes is None and p.startswith(_revisions.ENV_FILE + " is listed"))]
    if problems:
        raise StellaError("artifact_hash_mismatch", "; ".join(problems), phase="validate_payload",
                          evidence={"problems": problems})
    return lock, sticker_bytes, manifest_bytes, sticker, mhash


def listed_env_hash(manifest_bytes):
    try:
        return (json.loads(manifest_bytes).get("artifacts") or {}).get(_revisions.ENV_FILE)
    except (ValueError, AttributeError):
        return None


# --------------------------------------------------------------------------- target identity (pure)

def endpoint_host(endpoint):
    """The host named by a target endpoint (``ssh://user@host:22``, ``user@host``, ``host:port``, ``local``)."""
    text = (endpoint or "").strip()
    if text.lower() in LOCAL_ENDPOINTS or text.startswith("unix://") or text.startswith("npipe://"):
        return "localhost"
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://(?P<rest>[^/?#]*)", text)
    rest = match.group("rest") if match else text.split("/", 1)[0]
    rest = rest.rsplit("@", 1)[-1]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0].lower()
    if rest.count(":") == 1:
        rest = rest.split(":", 1)[0]
    return rest.lower()


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def endpoint_is_this_host(endpoint, addresses, hostnames, resolved=()):
    """True when ``endpoint`` names this host.

    ``addresses``: the host's own addresses (``ip -j addr``); ``hostnames``: its names;
    ``resolved``: addresses the endpoint's host name resolves to (for names).
    """
    host = endpoint_host(endpoint)
    if not host:
        return False
    if host in _LOOPBACK_NAMES:
        return True
    if _is_ip(host):
        address = ipaddress.ip_address(host)
        return address.is_loopback or host in set(addresses)
    names = {name.lower() for name in hostnames if name}
    if host in names or host.split(".", 1)[0] in {n.split(".", 1)[0] for n in names if "." not in host}:
        return True
    own = set(addresses)
    return any((ipaddress.ip_address(a).is_loopback if _is_ip(a) else False) or a in own for a in resolved)


def host_facts(run_command):
    """This host's addresses and names (``ip -j addr`` + ``socket``), for the identity check."""
    addresses = []
    try:
        if not shutil.which("ip"):
            raise OSError("ip not found")
        rc, out, _err = run_command(["ip", "-j", "addr"])
        if rc == 0:
            addresses = parse_ip_addresses(out)
    except OSError:
        addresses = []
    if not addresses:
        addresses = _resolve(socket.gethostname())
    names = [socket.gethostname()]
    with contextlib.suppress(OSError):
        names.append(socket.getfqdn())
    return {"addresses": addresses, "hostnames": sorted(set(names))}


def _resolve(host):
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return []


def ensure_this_host(target, run_command):
    """Raise ``wrong_host`` unless the target endpoint names the host this code runs on."""
    facts = host_facts(run_command)
    host = endpoint_host(target["endpoint"])
    resolved = [] if _is_ip(host) or host in _LOOPBACK_NAMES else _resolve(host)
    if not endpoint_is_this_host(target["endpoint"], facts["addresses"], facts["hostnames"], resolved):
        raise StellaError("wrong_host", "target %s endpoint %s does not name this host (%s; addresses %s)" % (
            target["id"], target["endpoint"], socket.gethostname(), ", ".join(facts["addresses"][:8])),
            phase="verify_target")
    return facts


# --------------------------------------------------------------------------- evidence (pure)

def project_evidence(target, layout):
    """Evidence every ComposeHost run starts with: target identity and the project's logical paths."""
    evidence = dict(target_evidence(target))
    evidence.update({"projectName": layout.project_name, "projectDirectory": layout.project_dir,
                     "composePath": layout.lock_path, "composeLockPath": layout.lock_path,
                     "applyManifestPath": layout.manifest_path, "versionStickerPath": layout.sticker_path,
                     "services": [], "serviceCount": 0})
    return evidence


def target_evidence(target):
    return {"targetId": target["id"], "targetName": target["name"], "targetType": target["type"],
            "targetEndpoint": target["endpoint"], "targetExecutionMode": target["executionMode"]}


def deployment_phases(completed, durations, failure_phase, skipped=(), groups=DEPLOYMENT_PHASES):
    """High-level phase list from the implementation phases (status, durationMs)."""
    out = []
    for name, parts in groups:
        relevant = [p for p in parts if p in completed or p == failure_phase or p in durations or p in skipped]
        if not relevant:
            continue
        if failure_phase in parts:
            status = "failed"
        elif all(p in skipped for p in relevant):
            status = "skipped"
        elif all(p in completed or p in skipped for p in relevant):
            status = "succeeded"
        else:
            status = "not_run"
        out.append({"phase": name, "status": status,
                    "durationMs": int(sum(durations.get(p, 0) for p in relevant))})
    return out


class PhaseRecorder:
    """Records completed phases, durations and the failing phase."""

    def __init__(self):
        self.completed = []
        self.durations = {}
        self.skipped = []
        self.failure_phase = None

    @contextlib.contextmanager
    def phase(self, name):
        start = time.monotonic()
        try:
            yield
        except StellaError as exc:
            self.durations[name] = int((time.monotonic() - start) * 1000)
            if not exc.phase:
                exc.phase = name
            self.failure_phase = exc.phase
            raise
        self.durations[name] = int((time.monotonic() - start) * 1000)
        self.completed.append(name)

    def skip(self, name):
        self.skipped.append(name)
        self.durations.setdefault(name, 0)

    def evidence(self, groups=DEPLOYMENT_PHASES):
        return {
            "completedPhases": list(self.completed),
            "phaseDurationsMs": dict(self.durations),
            "deploymentPhases": deployment_phases(self.completed, self.durations, self.failure_phase, self.skipped,
                                                  groups),
            "failurePhase": self.failure_phase,
        }


def service_images(config):
    """``{service: image}`` from ``docker compose config --format json`` output."""
    services = (config or {}).get("services") or {}
    return {name: (services[name] or {}).get("image") for name in sorted(services)}


def service_labels(config):
    services = (config or {}).get("services") or {}
    out = {}
    for name in sorted(services):
        labels = (services[name] or {}).get("labels") or {}
        if isinstance(labels, list):
            labels = dict(item.split("=", 1) if "=" in item else (item, "") for item in labels)
        out[name] = dict(labels)
    return out


def check_pinned(images):
    """Every service image must be ``registry/repository[:tag]@sha256:...``."""
    for service, image in sorted(images.items()):
        if not image or not parse_image_ref(image).digest:
            raise StellaError("image_not_pinned", "service %s image %r is not pinned by digest" % (service, image),
                              phase="validate_payload")


def _stella_labels(labels):
    return {k: v for k, v in sorted((labels or {}).items())
            if k.startswith("stella.") or k in ("com.docker.compose.project", "com.docker.compose.service")}


def verify_services(expected_images, expected_labels, containers, image_ids, target, manifest_hash):
    """Check inspected containers against the lock; return ``(services evidence, problems)`` (pure).

    ``containers``: :func:`container_summary` dicts of the project; ``image_ids``: ``{service: image id
    of the pinned digest}``.
    """
    services = []
    problems = []
    by_service = {}
    for container in containers:
        by_service.setdefault(container.get("service"), []).append(container)
    want_target = {"stella.target.id": target["id"], "stella.target.name": target["name"],
                   "stella.target.type": target["type"], "stella.target.endpoint": target["endpoint"],
                   "stella.execution.mode": target["executionMode"], "stella.manifest.hash": manifest_hash}
    for service in sorted(expected_images):
        found = sorted(by_service.get(service, []), key=lambda c: c.get("name") or "")
        if not found:
            problems.append(("service_not_running", "service %s has no container" % service))
            continue
        image = expected_images[service]
        digest = parse_image_ref(image).digest
        for container in found:
            entry = {
                "service": service,
                "containerId": container["id"],
                "containerName": container["name"],
                "state": container["state"],
                "health": container["health"],
                "exitCode": container.get("exitCode"),
                "startedAt": container.get("startedAt"),
                "image": image,
                "imageDigest": digest if container.get("imageId") == image_ids.get(service) else None,
                "imageId": container.get("imageId"),
                "ipAddress": container.get("ipAddress"),
                "labels": _stella_labels(container.get("labels")),
            }
            services.append(entry)
            name = container["name"]
            if not container.get("running") or container.get("restarting"):
                problems.append(("service_not_running", "container %s of service %s is %s (exit code %s)" % (
                    name, service, container.get("state"), container.get("exitCode"))))
            elif container.get("health") not in ("healthy", "none"):
                problems.append(("service_unhealthy", "container %s of service %s health is %s" % (
                    name, service, container.get("health"))))
            if container.get("imageId") != image_ids.get(service):
                problems.append(("digest_mismatch", "container %s runs image %s, not the pinned %s (%s)" % (
                    name, container.get("imageId"), image, image_ids.get(service))))
            labels = container.get("labels") or {}
            wanted = dict(expected_labels.get(service) or {})
            for key in REQUIRED_STELLA_LABELS:
                if key not in wanted:
                    problems.append(("label_mismatch", "service %s lock lacks required label %s" % (service, key)))
            wanted.update(want_target)
            for key in sorted(wanted):
                if labels.get(key) != wanted[key]:
                    problems.append(("label_mismatch", "container %s label %s is %r, expected %r" % (
                        name, key, labels.get(key), wanted[key])))
    extra = sorted(set(by_service) - set(expected_images), key=str)
    for service in extra:
        problems.append(("service_unexpected", "project has containers of service %s not in the lock" % service))
    return services, problems


def raise_problems(problems, phase, evidence=None):
    if problems:
        code = problems[0][0]
        reason = problems[0][1]
        if len(problems) > 1:
            reason += " (and %d more problem(s))" % (len(problems) - 1)
        raise StellaError(code, reason, phase=phase, evidence=dict(evidence or {}, problems=[p[1] for p in problems]))


def container_fingerprint(containers):
    """What ``changed`` compares: container ids with their start times."""
    return sorted((c.get("id"), c.get("startedAt")) for c in containers)


def lock_diff(before, after, path):
    return {"before": before or "", "after": after or "", "before_header": path, "after_header": path}


# --------------------------------------------------------------------------- ComposeHost engine

class ComposeHost:
    """Apply a compose.up request on this host."""

    def __init__(self, run_command, docker="docker", warn=None, wait_timeout=120, keep_revisions=10, secrets=()):
        self.run_command = run_command
        self.cli = DockerCli(run_command, docker=docker, warn=warn or (lambda _m: None))
        self.warn = warn or (lambda _m: None)
        self.wait_timeout = wait_timeout
        self.keep_revisions = keep_revisions
        self.secrets = tuple(s for s in secrets if s)

    # ---- shared steps (rollback uses them too)
    def runtime(self, phase="preflight"):
        try:
            docker = self.cli.version(phase=phase)
        except StellaError as exc:
            exc.phase = phase
            raise
        compose = self.cli.compose_version(phase=phase)
        return {"dockerClientVersion": docker["client"], "dockerServerVersion": docker["server"],
                "dockerApiVersion": docker["serverApiVersion"], "composeVersion": compose,
                "os": docker["os"], "arch": docker["arch"]}

    def read_config(self, layout, phase):
        _rc, out, _err = self.cli.run(self.cli.compose_base(layout.project_name, layout.lock_path, layout.project_dir)
                                      + ["config", "--format", "json"], code="lock_invalid", phase=phase)
        try:
            return json.loads(out)
        except ValueError:
            raise StellaError("lock_invalid", "docker compose config printed no JSON", phase=phase)

    def current_containers(self, project, phase=None):
        ids = self.cli.project_container_ids(project, phase=phase)
        return self.cli.inspect_containers(ids, phase=phase)

    def ensure_images(self, layout, images, pull, phase):
        """Pull what is missing (or fail when pulls are disabled); verify RepoDigests; return image ids."""
        ids = {}
        missing = []
        found = self.cli.image_inspect_many(images.values(), phase=phase)
        for service, image in sorted(images.items()):
            if found[image] is None:
                missing.append(service)
            else:
                ids[service] = found[image]
        pulled = []
        if missing:
            if not pull:
                raise StellaError("image_missing", "PullImages is false and image(s) are not present: %s" % ", ".join(
                    images[s] for s in missing), phase=phase)
            _rc, _out, _err = self.cli.run(self.cli.compose_base(layout.project_name, layout.lock_path,
                                                                 layout.project_dir) + ["pull", "--quiet"] + missing,
                                           code="image_pull_failed", phase=phase)
            pulled = list(missing)
            for service in missing:
                info = self.cli.image_inspect(images[service], phase=phase)
                if info is None:
                    raise StellaError("image_pull_failed", "image %s is still absent after pull" % images[service],
                                      phase=phase)
                ids[service] = info
        problems = []
        for service in sorted(images):
            if not repo_digests_contain(ids[service]["repoDigests"], images[service]):
                problems.append(("digest_mismatch", "image %s of service %s has RepoDigests %s, none is the pinned "
                                 "digest" % (images[service], service, ids[service]["repoDigests"])))
        raise_problems(problems, phase)
        return {service: ids[service]["id"] for service in ids}, pulled

    def verify(self, layout, config, image_ids, target, manifest_hash, phase):
        containers = self.current_containers(layout.project_name, phase=phase)
        services, problems = verify_services(service_images(config), service_labels(config), containers, image_ids,
                                             target, manifest_hash)
        return containers, services, problems

    # ---- the apply
    def apply(self, request, check_mode=False, diff=False, env_bytes=None):
        rec = PhaseRecorder()
        target = request["target"]
        layout = _revisions.Layout(request["work_directory"], request["project_name"])
        evidence = project_evidence(target, layout)
        evidence["hookResults"] = []
        result = {"changed": False, "evidence": evidence, "warnings": []}
        try:
            self._apply(request, layout, rec, result, check_mode, diff, env_bytes)
        except StellaError as exc:
            evidence.update(rec.evidence())
            evidence["failurePhase"] = exc.phase
            exc.evidence = dict(evidence, **(exc.evidence or {}))
            exc.evidence["changed"] = result["changed"]
            raise
        evidence.update(rec.evidence())
        return result

    def _apply(self, request, layout, rec, result, check_mode, diff, env_bytes):
        evidence = result["evidence"]
        target = request["target"]
        lock, sticker_bytes, manifest_bytes, sticker, mhash = check_artifacts(request, env_bytes)
        env_hash = listed_env_hash(manifest_bytes)
        evidence.update({"manifestHash": mhash, "composeLockHash": sha256_bytes(lock),
                         "versionStickerHash": sha256_bytes(sticker_bytes),
                         "applyManifestHash": sha256_bytes(manifest_bytes),
                         "artifactHashes": dict(json.loads(manifest_bytes)["artifacts"],
                                                **{_revisions.MANIFEST_FILE: sha256_bytes(manifest_bytes)}),
                         "slot": sticker.get("slot"), "trafficRole": sticker.get("trafficRole")})
        ensure_this_host(target, self.run_command)
        evidence["runtime"] = runtime = self.runtime()
        evidence.update({"dockerVersion": runtime["dockerServerVersion"], "composeVersion": runtime["composeVersion"]})
        new_files = {_revisions.LOCK_FILE: lock, _revisions.STICKER_FILE: sticker_bytes,
                     _revisions.MANIFEST_FILE: manifest_bytes}

        if check_mode:
            return self._check_mode(request, layout, rec, result, new_files, diff)

        wait_start = time.monotonic()
        with project_lock(layout.project_dir):
            evidence["lockWaitMs"] = int((time.monotonic() - wait_start) * 1000)
            before_files = _revisions.read_current(layout)
            before_env = read_bytes(layout.env_path)
            if diff:
                result["diff"] = lock_diff((before_files[_revisions.LOCK_FILE] or b"").decode("utf-8", "replace"),
                                           lock.decode("utf-8"), layout.lock_path)
            before_containers = self.current_containers(layout.project_name, phase="write_artifacts")
            converged = self._converged(layout, new_files, before_files, before_env, env_bytes, env_hash,
                                        before_containers, target, mhash)
            if converged is not None:
                # Same artifacts, every service verified: nothing to do, no hook runs, no container touched.
                evidence["services"] = converged
                evidence["serviceCount"] = len({s["service"] for s in converged})
                for name in COMPOSE_PHASES:
                    if name != "inspect_services":
                        rec.skip(name)
                with rec.phase("inspect_services"):
                    pass
                evidence["previousRevisionPath"] = self._latest_other(layout, sticker_bytes)
                if not evidence["previousRevisionPath"]:
                    del evidence["previousRevisionPath"]
                return
            self._deploy(request, layout, rec, result, new_files, before_files, before_env, env_bytes, env_hash,
                         before_containers, mhash)

    def _latest_other(self, layout, sticker_bytes):
        for path in reversed(_revisions.list_revisions(layout)):
            if read_bytes(os.path.join(path, _revisions.STICKER_FILE)) != sticker_bytes:
                return path
        return None

    def _converged(self, layout, new_files, before_files, before_env, env_bytes, env_hash, containers, target, mhash):
        """Services evidence when files and runtime already match the request, else ``None``."""
        if any(before_files[name] != new_files[name] for name in _revisions.REVISION_FILES):
            return None
        if env_hash and sha256_bytes(before_env or b"") != env_hash:
            return None
        if env_bytes is not None and before_env != env_bytes:
            return None
        if not containers:
            return None
        try:
            config = self.read_config(layout, "inspect_services")
            images = service_images(config)
            ids = {}
            found = self.cli.image_inspect_many(images.values(), phase="inspect_services")
            for service, image in images.items():
                info = found[image]
                if info is None or not repo_digests_contain(info["repoDigests"], image):
                    return None
                ids[service] = info["id"]
        except StellaError:
            return None
        services, problems = verify_services(images, service_labels(config), containers, ids, target, mhash)
        return None if problems else services

    def _deploy(self, request, layout, rec, result, new_files, before_files, before_env, env_bytes, env_hash,
                before_containers, mhash):
        evidence = result["evidence"]
        target = request["target"]
        hook_env = self._hook_env(request, layout, mhash)
        staged = False
        runtime_touched = False

        def restore_lock():
            # Nothing ran yet: put the previous lock back so the files keep describing what runs.
            if staged and not runtime_touched:
                previous = before_files[_revisions.LOCK_FILE]
                if previous is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(layout.lock_path)
                else:
                    atomic_write(layout.lock_path, previous)
                evidence["lockRestored"] = True

        try:
            with rec.phase("write_artifacts"):
                removed = remove_stale_temps(layout.project_dir) + _revisions.remove_stale_revision_temps(layout)
                if removed:
                    evidence["removedStaleTemps"] = removed
                if env_hash and env_bytes is None and sha256_bytes(before_env or b"") != env_hash:
                    raise StellaError("artifact_missing", "apply manifest lists %s but it was not supplied and the "
                                      "file on the target does not match" % _revisions.ENV_FILE)
                if request["backup_existing"]:
                    baseline = self._retain_baseline(layout, before_files, new_files)
                    if baseline:
                        evidence["previousRevisionPath"] = baseline
                staged = True
                atomic_write(layout.lock_path, new_files[_revisions.LOCK_FILE])
                if env_bytes is not None and before_env != env_bytes:
                    atomic_write(layout.env_path, env_bytes, mode=0o600)
                config = self.read_config(layout, "write_artifacts")
                images = service_images(config)
                check_pinned(images)
            with rec.phase("pre_deploy_hooks"):
                _hooks.run_phase(request["hooks"], "pre-deploy", layout.project_dir, hook_env, self.secrets,
                                 evidence["hookResults"], result["warnings"])
            with rec.phase("compose_pull"):
                image_ids, pulled = self.ensure_images(layout, images, request["pull_images"], "compose_pull")
                evidence["pulledServices"] = pulled
                evidence["imageIds"] = image_ids
        except StellaError:
            restore_lock()
            raise

        runtime_touched = True
        try:
            with rec.phase("compose_up"):
                self.cli.compose_up(layout.project_name, layout.lock_path, layout.project_dir,
                                    wait_timeout=self.wait_timeout)
        except StellaError as exc:
            result["changed"] = True
            with contextlib.suppress(StellaError):
                _c, services, _p = self.verify(layout, config, image_ids, target, mhash, "compose_up")
                evidence["services"] = services
                evidence["serviceCount"] = len({s["service"] for s in services})
            exc.code = self._up_failure_code(exc.reason, exc.code)
            raise
        with rec.phase("inspect_services"):
            after_containers, services, problems = self.verify(layout, config, image_ids, target, mhash,
                                                               "inspect_services")
            evidence["services"] = services
            evidence["serviceCount"] = len({s["service"] for s in services})
            result["changed"] = container_fingerprint(after_containers) != container_fingerprint(before_containers)
            raise_problems(problems, "inspect_services")
        with rec.phase("write_sticker"):
            staged_lock = read_bytes(layout.lock_path)
            artifacts = {_revisions.LOCK_FILE: staged_lock, _revisions.STICKER_FILE: new_files[_revisions.STICKER_FILE],
                         _revisions.ENV_FILE: read_bytes(layout.env_path) if env_hash else None}
            problems = verify_artifact_set(new_files[_revisions.MANIFEST_FILE], artifacts, layout.project_name, mhash)
            if problems:
                raise StellaError("artifact_hash_mismatch", "; ".join(problems), phase="write_sticker")
            if before_files[_revisions.STICKER_FILE] != new_files[_revisions.STICKER_FILE]:
                atomic_write(layout.sticker_path, new_files[_revisions.STICKER_FILE])
            if before_files[_revisions.MANIFEST_FILE] != new_files[_revisions.MANIFEST_FILE]:
                atomic_write(layout.manifest_path, new_files[_revisions.MANIFEST_FILE])
        after_files = _revisions.read_current(layout)
        if after_files != before_files or read_bytes(layout.env_path) != before_env:
            result["changed"] = True
        with rec.phase("post_deploy_hooks"):
            _hooks.run_phase(request["hooks"], "post-deploy", layout.project_dir, hook_env, self.secrets,
                             evidence["hookResults"], result["warnings"])

    @staticmethod
    def _up_failure_code(reason, code):
        text = reason or ""
        if re.search(r"is unhealthy", text):
            return "service_unhealthy"
        if re.search(r"exited \(\d+\)|has exited|is not running|restarting", text):
            return "service_not_running"
        if re.search(r"manifest unknown|not found|pull access denied", text):
            return "image_pull_failed"
        return code

    def _retain_baseline(self, layout, before_files, new_files):
        """Retain the current committed revision when it exists and differs; return the baseline path."""
        current = {name: before_files[name] for name in _revisions.REVISION_FILES}
        if current[_revisions.STICKER_FILE] is None or current[_revisions.MANIFEST_FILE] is None:
            return None
        same = all(current[name] == new_files[name] for name in (_revisions.LOCK_FILE, _revisions.STICKER_FILE))
        if same:
            return self._latest_other(layout, new_files[_revisions.STICKER_FILE])
        consistent = not verify_artifact_set(current[_revisions.MANIFEST_FILE], {
            _revisions.LOCK_FILE: current[_revisions.LOCK_FILE], _revisions.STICKER_FILE: current[_revisions.STICKER_FILE],
            _revisions.ENV_FILE: read_bytes(layout.env_path) if listed_env_hash(current[_revisions.MANIFEST_FILE])
            else None}, layout.project_name)
        if not consistent:
            # A failed apply left its lock staged; the last committed revision was retained then.
            for path in reversed(_revisions.list_revisions(layout)):
                if read_bytes(os.path.join(path, _revisions.STICKER_FILE)) == current[_revisions.STICKER_FILE]:
                    return path
            return None
        existing = _revisions.find_identical(layout, current)
        if existing:
            return existing
        try:
            mhash = json.loads(current[_revisions.STICKER_FILE]).get("manifestHash")
        except ValueError:
            return None
        files = dict(current)
        env_now = read_bytes(layout.env_path)
        if env_now is not None and listed_env_hash(current[_revisions.MANIFEST_FILE]):
            files[_revisions.ENV_FILE] = env_now
        return _revisions.retain_revision(layout, files, mhash, keep=self.keep_revisions)

    def _hook_env(self, request, layout, mhash):
        env = {"STELLA_PROJECT_NAME": layout.project_name, "STELLA_PROJECT_DIRECTORY": layout.project_dir,
               "STELLA_MANIFEST_HASH": mhash, "STELLA_TARGET_ID": request["target"]["id"],
               "STELLA_COMPOSE_PATH": layout.lock_path}
        return env

    def _check_mode(self, request, layout, rec, result, new_files, diff):
        evidence = result["evidence"]
        before_files = _revisions.read_current(layout) if os.path.isdir(layout.project_dir) else dict.fromkeys(
            _revisions.REVISION_FILES)
        if diff:
            result["diff"] = lock_diff((before_files[_revisions.LOCK_FILE] or b"").decode("utf-8", "replace"),
                                       new_files[_revisions.LOCK_FILE].decode("utf-8"), layout.lock_path)
        containers = self.current_containers(layout.project_name, phase="write_artifacts")
        changed_files = sorted(name for name in _revisions.REVISION_FILES if before_files[name] != new_files[name])
        converged = None
        if not changed_files and os.path.isfile(layout.lock_path):
            converged = self._converged(layout, new_files, before_files, read_bytes(layout.env_path), None,
                                        listed_env_hash(new_files[_revisions.MANIFEST_FILE]), containers,
                                        request["target"], evidence["manifestHash"])
        result["changed"] = converged is None
        evidence["wouldChangeFiles"] = changed_files
        evidence["wouldRetainRevision"] = bool(request["backup_existing"] and before_files[_revisions.STICKER_FILE]
                                               and changed_files)
        if converged:
            evidence["services"] = converged
            evidence["serviceCount"] = len({s["service"] for s in converged})
        for name in COMPOSE_PHASES:
            rec.skip(name)
        evidence["checkMode"] = True


# --------------------------------------------------------------------------- DockerHost engine

def docker_request_from_payload(payload, overrides=None):
    """Normalize a verbatim ``docker.run`` task payload."""
    _check_keys(payload, DOCKER_RUN_KEYS, DOCKER_RUN_REQUIRED, "docker.run")
    image = _text(payload["Image"], "Image")
    if not parse_image_ref(image).digest:
        raise _bad("Image %r must be pinned by digest (registry/repository:tag@sha256:...)" % image)
    labels = payload.get("Labels") or {}
    environment = payload.get("Environment") or {}
    for key, mapping in (("Labels", labels), ("Environment", environment)):
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise _bad("%s must be an object of strings" % key)
    ports = payload.get("Ports") or []
    if not isinstance(ports, list):
        raise _bad("Ports must be a list")
    name = _text(payload["Name"], "Name")
    if not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$", name):
        raise _bad("Name %r is not a valid container name" % name)
    return {
        "image": image,
        "name": name,
        "pull_image": _bool(payload["PullImage"], "PullImage"),
        "hooks": _hooks.normalize_hooks(payload.get("Hooks") or []),
        "labels": dict(labels),
        "environment": dict(environment),
        "ports": [str(p) for p in ports],
        "work_directory": payload.get("WorkDirectory") or (overrides or {}).get("work_directory")
        or DEFAULT_WORK_DIRECTORY,
        "manifest_hash": payload.get("ManifestHash") or labels.get("stella.manifest.hash"),
        "target": normalize_target(payload["Target"]),
        "env_file": payload.get("EnvFile"),
        "project_directory": _docker_project_dir(payload, overrides),
    }


def _docker_project_dir(payload, overrides):
    """The Stella-owned directory of a docker.run task (hooks' default cwd, the per-project lock)."""
    variables = payload.get("Variables") or {}
    work = payload.get("WorkDirectory") or (overrides or {}).get("work_directory") or DEFAULT_WORK_DIRECTORY
    directory = variables.get("projectDirectory") or os.path.join(work, variables.get("projectName") or payload["Name"])
    if not isinstance(directory, str) or not os.path.isabs(directory):
        raise _bad("project directory %r must be an absolute path" % (directory,))
    return directory


def container_run_argv(request, temp_name=None):
    """``docker run`` arguments (after ``run --detach``) for a docker.run request (pure)."""
    argv = ["--name", temp_name or request["name"], "--restart", "unless-stopped"]
    for key in sorted(request["labels"]):
        argv += ["--label", "%s=%s" % (key, request["labels"][key])]
    argv += ["--label", "stella.container.name=%s" % request["name"]]
    for key in sorted(request["environment"]):
        argv += ["--env", "%s=%s" % (key, request["environment"][key])]
    if request.get("env_file"):
        argv += ["--env-file", request["env_file"]]
    for port in request["ports"]:
        argv += ["--publish", port]
    argv.append(request["image"])
    return argv


def container_matches(container, request, image_id):
    """True when an inspected container already runs this request (image, labels, env)."""
    if not container or container.get("imageId") != image_id or not container.get("running"):
        return False
    labels = container.get("labels") or {}
    if any(labels.get(k) != v for k, v in request["labels"].items()):
        return False
    return labels.get("stella.container.name") == request["name"]


class DockerHost:
    """Apply a docker.run request on this host: pull+verify first, then replace the container."""

    def __init__(self, run_command, docker="docker", warn=None, health_timeout=60, secrets=()):
        self.run_command = run_command
        self.cli = DockerCli(run_command, docker=docker, warn=warn or (lambda _m: None))
        self.health_timeout = health_timeout
        self.secrets = tuple(s for s in secrets if s)

    def apply(self, request, check_mode=False):
        rec = PhaseRecorder()
        target = request["target"]
        evidence = dict(target_evidence(target))
        evidence.update({"containerName": request["name"], "image": request["image"],
                         "imageDigest": parse_image_ref(request["image"]).digest,
                         "manifestHash": request["manifest_hash"], "hookResults": []})
        result = {"changed": False, "evidence": evidence, "warnings": []}
        try:
            self._apply(request, rec, result, check_mode)
        except StellaError as exc:
            evidence.update(rec.evidence())
            evidence["failurePhase"] = exc.phase
            exc.evidence = dict(evidence, **(exc.evidence or {}), changed=result["changed"])
            raise
        evidence.update(rec.evidence())
        return result

    def _image_id(self, request, phase):
        info = self.cli.image_inspect(request["image"], phase=phase)
        if info is None:
            return None
        if not repo_digests_contain(info["repoDigests"], request["image"]):
            raise StellaError("digest_mismatch", "image %s has RepoDigests %s, none is the pinned digest" % (
                request["image"], info["repoDigests"]), phase=phase)
        return info["id"]

    def _apply(self, request, rec, result, check_mode):
        evidence = result["evidence"]
        ensure_this_host(request["target"], self.run_command)
        docker = self.cli.version(phase="preflight")
        evidence.update({"dockerVersion": docker["server"], "dockerClientVersion": docker["client"]})
        labels = request["labels"]
        for key in REQUIRED_STELLA_LABELS:
            if key not in labels:
                raise StellaError("label_missing", "docker.run Labels lack %s" % key, phase="validate_payload")
        hook_dir = request["project_directory"]
        if check_mode:
            image_id = self._image_id(request, "pull_image")
            existing = self.cli.inspect_containers(self.cli.containers_by_name(request["name"]))
            result["changed"] = not (existing and container_matches(existing[0], request, image_id))
            evidence["checkMode"] = True
            for name in DOCKER_PHASES:
                rec.skip(name)
            return
        os.makedirs(hook_dir, exist_ok=True)
        with project_lock(hook_dir):
            # Pull and verify BEFORE listing, stopping or creating any container.
            with rec.phase("pull_image"):
                image_id = self._image_id(request, "pull_image")
                if request["pull_image"] and image_id is None:
                    self.cli.pull(request["image"], phase="pull_image")
                    evidence["pulled"] = True
                    image_id = self._image_id(request, "pull_image")
                if image_id is None:
                    raise StellaError("image_missing", "image %s is not present and PullImage is false" %
                                      request["image"], phase="pull_image")
                evidence["imageId"] = image_id
            existing = self.cli.inspect_containers(self.cli.containers_by_name(request["name"], phase="prepare_container"),
                                                   phase="prepare_container")
            current = existing[0] if existing else None
            if current and container_matches(current, request, image_id) and current.get("health") in ("healthy", "none"):
                for name in ("pre_deploy_hooks", "prepare_container", "post_deploy_hooks"):
                    rec.skip(name)
                with rec.phase("inspect_container"):
                    self._record(evidence, current)
                return
            env = {"STELLA_CONTAINER_NAME": request["name"], "STELLA_MANIFEST_HASH": request["manifest_hash"] or "",
                   "STELLA_TARGET_ID": request["target"]["id"]}
            with rec.phase("pre_deploy_hooks"):
                _hooks.run_phase(request["hooks"], "pre-deploy", hook_dir, env, self.secrets, evidence["hookResults"],
                                 result["warnings"])
            with rec.phase("prepare_container"):
                if current:
                    evidence["replacedContainerId"] = current["id"]
                    self.cli.remove_container(current["id"], phase="prepare_container")
                result["changed"] = True
                self.cli.run_container(container_run_argv(request), phase="prepare_container")
            with rec.phase("inspect_container"):
                container = self._wait(request["name"])
                self._record(evidence, container)
                problems = []
                if not container.get("running"):
                    problems.append(("service_not_running", "container %s is %s (exit code %s)" % (
                        container["name"], container["state"], container.get("exitCode"))))
                elif container.get("health") not in ("healthy", "none"):
                    problems.append(("service_unhealthy", "container %s health is %s" % (
                        container["name"], container["health"])))
                if container.get("imageId") != image_id:
                    problems.append(("digest_mismatch", "container %s runs %s, not %s" % (
                        container["name"], container.get("imageId"), image_id)))
                for key, value in sorted(request["labels"].items()):
                    if container["labels"].get(key) != value:
                        problems.append(("label_mismatch", "label %s is %r, expected %r" % (
                            key, container["labels"].get(key), value)))
                raise_problems(problems, "inspect_container")
            with rec.phase("post_deploy_hooks"):
                _hooks.run_phase(request["hooks"], "post-deploy", hook_dir, env, self.secrets, evidence["hookResults"],
                                 result["warnings"])

    def _wait(self, name):
        deadline = time.monotonic() + self.health_timeout
        while True:
            found = self.cli.inspect_containers(self.cli.containers_by_name(name, phase="inspect_container"),
                                                phase="inspect_container")
            if not found:
                raise StellaError("service_not_running", "container %s disappeared" % name, phase="inspect_container")
            container = found[0]
            settled = not container.get("running") or container.get("health") in ("healthy", "none", "unhealthy")
            if settled or time.monotonic() > deadline:
                return container
            time.sleep(0.5)

    @staticmethod
    def _record(evidence, container):
        evidence.update({"containerId": container["id"], "containerName": container["name"],
                         "containerState": container["state"], "health": container["health"],
                         "ipAddress": container.get("ipAddress"), "startedAt": container.get("startedAt"),
                         "labels": _stella_labels(container.get("labels"))})
