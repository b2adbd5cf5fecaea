# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The runtime contract's vocabulary, defined once for the controller and the target agent.

File names, defaults and patterns; the nine deployment phases and the implementation phases that
make them up; codes; job ids; label names; the target identity shape; and the checks of the values
payloads carry (work directory, project name, revisions to keep). The agent task payload schemas
built from them are in :mod:`contract.tasks`. Pure and standard library only.
"""

from __future__ import annotations

import datetime
import hashlib
import posixpath
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

# ----------------------------------------------------------------------------------- timestamps
# Every timestamp a job record, evidence document or sticker carries: UTC, microseconds, "Z".
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_timestamp(moment=None):
    """``moment`` (an aware ``datetime``; default: now) as the contract writes timestamps."""
    moment = moment or datetime.datetime.now(datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def seconds_between(start, end):
    """Seconds from the contract timestamp ``start`` to ``end`` (negative when ``end`` is earlier);
    ``None`` when either is not one."""
    try:
        delta = datetime.datetime.strptime(end, TIMESTAMP_FORMAT) - datetime.datetime.strptime(start, TIMESTAMP_FORMAT)
    except (TypeError, ValueError):
        return None
    return delta.total_seconds()


# ---------------------------------------------------------------------------------------- files
LOCK_FILE = "compose.stella.lock.yml"
STICKER_FILE = "stella.version.json"
MANIFEST_FILE = "apply-manifest.json"
ENV_FILE = ".env.stella"
ENV_FILE_MODE = 0o600
LOCK_MARKER = ".stella.lock"
HOOK_MARKER = ".stella-hook.json"
REVISIONS_DIR = "revisions"
REVISION_RECORD = "revision.json"
TEMP_PREFIX = ".stella-tmp-"
REVISION_FILES = (LOCK_FILE, STICKER_FILE, MANIFEST_FILE)
# Sticker keys that name the job which applied a release: a later job that finds the same release
# running keeps the committed sticker (and these values) instead of rewriting it.
STICKER_JOB_KEYS = ("jobId", "taskId")
ARTIFACT_FILES = (LOCK_FILE, STICKER_FILE, ENV_FILE)
# DockerHost: the release before the running one is retained as stopped containers named
# ``<name>-stella-previous`` plus a revision directory holding its sticker and their ids.
DOCKER_REVISION_DIR = "previous"
DOCKER_PREVIOUS_SUFFIX = "-stella-previous"
DOCKER_REPLACED_SUFFIX = "-stella-replaced"
DOCKER_ROLLED_BACK_SUFFIX = "-stella-rolled-back"
# Evidence on the controller: a target's deployment records under ``<root>/<projectName>/<jobId>/<target>/``
# (the target's part keeps targets apart when a release names one projectName for all of them), a job's
# own records (job.json, rollback-evidence.json, report.html) under ``<root>/jobs/<jobId>/``.
EVIDENCE_JOBS_DIR = "jobs"
_PATH_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")


def path_component(name):
    """``name`` as one plain path component: itself when it is one, else its other characters replaced
    and a digest of the whole name appended, so two names never share a component."""
    if _PATH_COMPONENT.match(name):
        return name
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64].lstrip("._-") or "x"
    return "%s__%s" % (cleaned, hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12])


def project_evidence_dir(root, project_name, job_id):
    """Where the deployment evidence of every target of job ``job_id`` deploying ``project_name`` lies."""
    return posixpath.join(root, project_name or "unknown-project", job_id or "unknown-job")


def deployment_evidence_dir(root, project_name, job_id, target_id):
    """Where the deployment evidence of target ``target_id`` in job ``job_id`` is written."""
    return posixpath.join(
        project_evidence_dir(root, project_name, job_id), path_component(target_id or "unknown-target")
    )


def job_evidence_dir(root, job_id):
    """Where the evidence of the job ``job_id`` itself is written."""
    return posixpath.join(root, EVIDENCE_JOBS_DIR, job_id)


APPLY_MANIFEST_SCHEMA = "stella.apply-manifest.v1"
STICKER_SCHEMA = "stella.version.v1"
DESIRED_STATE_SCHEMA = "stella.desired-state.v1"
REVISION_SCHEMA = "stella.revision.v1"
DOCKER_REVISION_SCHEMA = "stella.docker-revision.v1"

# ---------------------------------------------------------------------------------------- defaults
DEFAULT_WORK_DIRECTORY = "/var/lib/stella/projects"
# How many retained revisions a project keeps (0: all).
DEFAULT_KEEP_REVISIONS = 10
DEFAULT_MINIMUM_FREE_DISK_BYTES = 1024**3
DEFAULT_REACHABILITY_MODE = "http"
REACHABILITY_MODES = ("http", "tcp", "skip")
DEFAULT_HOOK_INTERPRETER = "/bin/sh"
DEFAULT_HOOK_TIMEOUT = 300
DEFAULT_WAIT_TIMEOUT = 120
DEFAULT_COMMAND_TIMEOUT = 60
TARGET_TYPES = ("ComposeHost", "DockerHost")

# ---------------------------------------------------------------------------------------- patterns
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
MAX_PROJECT_LENGTH = 63
PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}\Z")
CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+\Z")

# ---------------------------------------------------------------------------------------- phases
PHASES = ("preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy", "evidence", "cleanup")
ROLLBACK_PHASE_NAMES = ("rollback-pre", "rollback-deploy", "rollback-verify", "rollback-post")
COMPOSE_STEPS = (
    "write_artifacts",
    "pre_deploy_hooks",
    "compose_pull",
    "compose_up",
    "inspect_services",
    "write_sticker",
    "post_deploy_hooks",
)
DOCKER_STEPS = (
    "pull_image",
    "write_artifacts",
    "pre_deploy_hooks",
    "prepare_container",
    "inspect_container",
    "write_sticker",
    "post_deploy_hooks",
)
ROLLBACK_STEPS = (
    "resolve_revision",
    "validate_revision",
    "restore_lock",
    "compose_pull",
    "compose_up",
    "inspect_services",
    "restore_sticker",
)
DOCKER_ROLLBACK_STEPS = (
    "resolve_revision",
    "validate_revision",
    "restore_container",
    "inspect_container",
    "restore_sticker",
)
# High-level product phases and the implementation phases (steps) that make them up.
DEPLOYMENT_PHASES = (
    ("preflight", ("verify_target", "preflight")),
    ("prepare", ("write_artifacts",)),
    ("pre-deploy", ("pre_deploy_hooks",)),
    ("deploy", ("compose_pull", "compose_up", "pull_image", "prepare_container")),
    ("verify", ("inspect_services", "inspect_container")),
    ("promote", ("write_sticker",)),
    ("post-deploy", ("post_deploy_hooks",)),
)
ROLLBACK_PHASES = (
    ("rollback-pre", ("resolve_revision", "validate_revision")),
    ("rollback-deploy", ("restore_lock", "compose_pull", "compose_up", "restore_container")),
    ("rollback-verify", ("inspect_services", "inspect_container")),
    ("rollback-post", ("restore_sticker",)),
)

# ---------------------------------------------------------------------------------------- codes
# The contract's stable preflight codes, and registry_auth_failed: the registry answers but refuses to let
# the release's repository be pulled (no credentials for a private image, or credentials refused).
PREFLIGHT_CODES = (
    "runtime_missing",
    "runtime_daemon_unavailable",
    "runtime_version_too_old",
    "compose_missing",
    "registry_unreachable",
    "registry_auth_failed",
    "platform_unsupported",
    "workdir_not_writable",
    "disk_space_low",
)
INVALID_PAYLOAD = "invalid_payload"

# ---------------------------------------------------------------------------------------- control plane
# Target health statuses kept in the job store (the contract's set; migrations must preserve it).
HEALTH_STATUSES = ("unknown", "healthy", "degraded", "unhealthy", "offline", "unreachable")
# Preflight codes that mean the host answers but has no usable container runtime.
OFFLINE_CODES = ("runtime_missing", "runtime_daemon_unavailable", "compose_missing")
UNREACHABLE_CODE = "target_unreachable"
PROJECT_BUSY = "project_busy"
# A job whose controller run ended before it finished (recorded Failed; its projects released).
JOB_INTERRUPTED = "job_interrupted"
# A job's claim on a target's project (``{"jobId", "generation", "storeId"}``): the job store that holds
# the job (``storeId``, created with the store) hands out a generation per project that only grows (the
# last one plus one, or the store's clock in milliseconds when that is higher, so a store restored from
# a backup never hands one out twice). Each apply and rollback of a job carries it; the target keeps,
# in CLAIM_FILE, the claim it last accepted and the newest one of each store, and refuses work whose
# generation is older than its store's newest (CLAIM_SUPERSEDED). A claim of another store takes the
# project over (recorded on both sides). A claim file that is missing or unreadable where a job's sticker
# runs refuses work of a job not shown newer than the sticker's (CLAIM_LOST).
CLAIM_SUPERSEDED = "claim_superseded"
CLAIM_LOST = "claim_lost"
CLAIM_FILE = ".stella-claim.json"
CLAIM_STORES_KEPT = 16  # the stores whose newest claim CLAIM_FILE keeps, most recently accepted first

# ---------------------------------------------------------------------------------------- job ids
# The job ids that tell their order: one the job store generates (the UTC second it was planned and 8
# random hex digits) and an AWX or Tower job's (``awx-<id>``, ``tower-<id>``).
GENERATED_JOB_ID = re.compile(r"^job-(\d{8}T\d{6})-[0-9a-f]{8}$")
CALLER_JOB_ID = re.compile(r"^(awx|tower)-(\d+)$")


def generated_job_id(now, token):
    """The id of a job planned at the contract timestamp ``now``: ``job-YYYYMMDDTHHMMSS-<token>``."""
    return "job-%s-%s" % (now[:19].replace("-", "").replace(":", ""), token)


def _job_rank(job_id):
    """``(scheme, rank)`` of a job id whose order is known, else ``None``."""
    text = job_id if isinstance(job_id, str) else ""
    generated, caller = GENERATED_JOB_ID.match(text), CALLER_JOB_ID.match(text)
    if generated:
        return ("generated", generated.group(1))
    if caller:
        return (caller.group(1), int(caller.group(2)))
    return None


def job_is_newer(job_id, than):
    """``True`` when job ``job_id`` is known to have started after job ``than``, ``False`` when known not
    to (started before it, or in the same second), ``None`` when their ids cannot tell (pure)."""
    mine, theirs = _job_rank(job_id), _job_rank(than)
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return None
    return mine[1] > theirs[1]


# A job step that records the job, asked in check mode: refused, nothing planned, persisted or changed.
JOB_CHECK_MODE = "job_check_mode_unsupported"
# Managed runtime installs (stella_runtime_install): where the target keeps its evidence and the copied
# offline bundle, and the stable failure codes (docs/runtime-install.md).
RUNTIME_INSTALL_EVIDENCE = "/var/lib/stella/runtime-install.json"
RUNTIME_INSTALL_BUNDLE_DIR = "/var/lib/stella/runtime-bundle"
RUNTIME_INSTALL_CODES = (
    "runtime_install_source_missing",
    "runtime_install_source_not_allowed",
    "runtime_install_source_invalid",
    "runtime_install_source_unreachable",
    "runtime_install_failed",
    "runtime_install_unverified",
)

# ---------------------------------------------------------------------------------------- labels
LABEL_MANIFEST_HASH = "stella.manifest.hash"
LABEL_PROJECT = "stella.project"
LABEL_COMPONENT = "stella.component"
LABEL_IMAGE_DIGEST = "stella.image.digest"
TARGET_LABELS = (
    ("stella.target.id", "id"),
    ("stella.target.name", "name"),
    ("stella.target.type", "type"),
    ("stella.target.endpoint", "endpoint"),
    ("stella.execution.mode", "executionMode"),
)
REQUIRED_STELLA_LABELS = (LABEL_MANIFEST_HASH,) + tuple(label for label, _key in TARGET_LABELS)
SLOT_LABELS = ("stella.slot", LABEL_PROJECT, "stella.traffic.role")

# ---------------------------------------------------------------------------------------- target identity
TARGET_KEYS = ("id", "name", "type", "endpoint", "executionMode")
LOCAL_ENDPOINTS = ("local", "localhost", "127.0.0.1", "::1", "[::1]")


def invalid(message, phase="validate_payload"):
    """The error for bad task input: nothing has been touched yet."""
    return StellaError(INVALID_PAYLOAD, message, phase=phase)


def _payload_key(key):
    return key[0].upper() + key[1:]


def parse_target(value, what="Target"):
    """The one internal target shape (``id, name, type, endpoint, executionMode``) from the payload's
    ``Target`` (``Id``, ``Name``...) or the snake_case option (``id``, ``name``...)."""
    if not isinstance(value, dict):
        raise invalid("%s must be an object with %s" % (what, ", ".join(TARGET_KEYS)))
    allowed = set(TARGET_KEYS) | {_payload_key(k) for k in TARGET_KEYS}
    extra = sorted(set(value) - allowed)
    if extra:
        raise invalid("%s has unknown key(s) %s" % (what, ", ".join(extra)))
    out = {}
    for key in TARGET_KEYS:
        if _payload_key(key) in value and key in value and value[key] != value[_payload_key(key)]:
            raise invalid("%s has both %s and %s with different values" % (what, _payload_key(key), key))
        found = value.get(_payload_key(key), value.get(key))
        if not isinstance(found, str) or not found:
            raise invalid("%s.%s is required and must be a non-empty string" % (what, _payload_key(key)))
        out[key] = found
    if out["type"] not in TARGET_TYPES:
        raise invalid("%s.Type %r is not one of %s" % (what, out["type"], ", ".join(TARGET_TYPES)))
    return out


def target_context(target):
    """The payload's ``Target`` object (contract key names)."""
    return {_payload_key(key): target[key] for key in TARGET_KEYS}


def target_evidence(target):
    """The identity every result echoes (``targetId``, ``targetName``...)."""
    return {
        "target" + _payload_key(key) if key != "executionMode" else "targetExecutionMode": target[key]
        for key in TARGET_KEYS
    }


def target_labels(target):
    """The Stella target identity labels."""
    return {label: target[key] for label, key in TARGET_LABELS}


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


# ---------------------------------------------------------------------------------------- values


def keep_revisions_problem(value):
    """Why ``value`` (an int, or the string a Compose option carries) is not a count of revisions to
    keep (``0``: all), or ``None`` when it is."""
    count = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if count or (isinstance(value, str) and value.isdigit()):
        return None
    return "keep_revisions must be 0 (keep every retained revision) or more, not %r" % (value,)


def check_work_directory(value, key="WorkDirectory"):
    """An absolute path without ``..`` segments, returned normalised (``//`` and ``/./`` folded)."""
    if not isinstance(value, str) or not value:
        raise invalid("%s must be a non-empty string" % key)
    if not value.startswith("/"):
        raise invalid("%s %r must be an absolute path" % (key, value))
    if ".." in value.split("/"):
        raise invalid("%s %r must not contain '..' segments" % (key, value))
    return posixpath.normpath("/" + value.lstrip("/"))


def check_project_name(value, key="ProjectName"):
    if not isinstance(value, str) or not PROJECT_RE.match(value):
        raise invalid(
            "%s %r must match %s (Compose project rules, at most %d characters)"
            % (key, value, PROJECT_RE.pattern, MAX_PROJECT_LENGTH)
        )
    return value
