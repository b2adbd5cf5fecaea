# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Managed runtime install (contract: "Runtime Modes"): Docker Engine and the Compose v2 plugin from a
configured package source only, on Debian-family targets.

Pure decisions (request parsing, what to install, the apt files, the evidence document) are plain
functions; :class:`RuntimeInstaller` runs them on the host through an injected ``run_command(argv)``
(always an argv list). Standard library only.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    RUNTIME_INSTALL_BUNDLE_DIR,
    RUNTIME_INSTALL_CODES,
    RUNTIME_INSTALL_EVIDENCE,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import one_line
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, read_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
    parse_version,
    version_at_least,
)

SCHEMA = "stella.runtime-install.v1"
EVIDENCE_PATH = RUNTIME_INSTALL_EVIDENCE
BUNDLE_TARGET_DIR = RUNTIME_INSTALL_BUNDLE_DIR
SOURCES_DIR = "/etc/apt/sources.list.d"
AUTH_DIR = "/etc/apt/auth.conf.d"
KEYRING_DIR = "/etc/apt/keyrings"
MODES = ("production", "offline", "lab", "development")
SOURCE_TYPES = ("apt", "bundle")
# Which source types each mode accepts. A missing source is an error in every mode, never a fallback to
# the host's own repositories; lab and development also accept unsigned apt repositories (apt_trusted).
ALLOWED_SOURCES = {"production": SOURCE_TYPES, "offline": ("bundle",), "lab": SOURCE_TYPES, "development": SOURCE_TYPES}
DEFAULT_ENGINE_PACKAGES = ("docker.io", "docker-cli")
DEFAULT_COMPOSE_PACKAGES = ("docker-compose-plugin",)
DEFAULT_START_TIMEOUT = 60
DEFAULT_INSTALL_TIMEOUT = 900
ENGINE_STARTS = ("auto", "systemd", "init-script", "daemon", "none")
# Stable failure codes (docs/runtime-install.md says when each is raised).
CODES = RUNTIME_INSTALL_CODES
PHASE = "runtime_install"


def _err(code, reason):
    return StellaError(code, reason, phase=PHASE)


def _unlink(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        return True
    return False


# --------------------------------------------------------------------------------------- pure parts


def split_credentials(url):
    """``http://u:p%21@host:1/x`` -> ``("http://host:1/x", "u", "p!", ["p!", "p%21"])``: the URL without
    userinfo, the user and password percent-decoded, and every form of the password (for masking)."""
    parts = urllib.parse.urlsplit(url or "")
    if parts.password is None:
        return redact_url(url), urllib.parse.unquote(parts.username) if parts.username else None, None, []
    raw = parts.netloc.rsplit("@", 1)[0].split(":", 1)[1]
    password = urllib.parse.unquote(raw)
    return redact_url(url), urllib.parse.unquote(parts.username or ""), password, sorted({raw, password} - {""})


def parse_request(params):
    """Validate the options into a request; every refusal happens here, before the host is touched."""
    mode = params.get("mode") or "production"
    stype = params.get("source_type")
    if not stype:
        raise _err(
            "runtime_install_source_missing",
            "no package source configured for a managed install in %s "
            "mode (set source_type to apt or bundle); the host's default repositories are never used "
            "as a fallback" % mode,
        )
    if stype not in ALLOWED_SOURCES[mode]:
        raise _err(
            "runtime_install_source_not_allowed",
            "source type %s is not allowed in %s mode (allowed: %s)" % (stype, mode, ", ".join(ALLOWED_SOURCES[mode])),
        )
    name = params.get("source_name") or "runtime"
    if not name.replace("-", "").replace("_", "").isalnum():
        raise _err("runtime_install_source_invalid", "source_name must be letters, digits, '-' or '_'")
    req = {
        "mode": mode,
        "source_type": stype,
        "source_name": name,
        "secrets": [],
        "engine_packages": list(params.get("engine_packages") or DEFAULT_ENGINE_PACKAGES),
        "compose_packages": list(params.get("compose_packages") or DEFAULT_COMPOSE_PACKAGES),
        "install_recommends": bool(params.get("install_recommends")),
        "min_engine_version": params.get("min_engine_version") or DEFAULT_MIN_ENGINE,
        "min_compose_version": params.get("min_compose_version") or DEFAULT_MIN_COMPOSE,
        "engine_start": params.get("engine_start") or "auto",
        "start_timeout": int(params.get("start_timeout") or DEFAULT_START_TIMEOUT),
        "install_timeout": int(params.get("install_timeout") or DEFAULT_INSTALL_TIMEOUT),
        "evidence_path": params.get("evidence_path") or EVIDENCE_PATH,
    }
    for gate in ("min_engine_version", "min_compose_version"):
        if parse_version(req[gate]) is None:
            raise _err("runtime_install_source_invalid", "%s %r is not a version" % (gate, req[gate]))
    if stype == "apt":
        req["apt"] = _parse_apt(params, mode, req["secrets"])
    elif stype == "bundle":
        req["bundle"] = _parse_bundle(params)
    return req


def _parse_apt(params, mode, secrets):
    url = (params.get("apt_url") or "").strip()
    if not url:
        raise _err("runtime_install_source_missing", "source_type apt needs apt_url (the repository URL)")
    clean, user, password, embedded = split_credentials(url)
    secrets.extend(embedded)
    parts = urllib.parse.urlsplit(clean)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _err("runtime_install_source_invalid", "apt_url must be an http:// or https:// URL, got %r" % clean)
    if params.get("apt_password") or params.get("apt_username"):
        if user or password:
            raise _err(
                "runtime_install_source_invalid",
                "give the repository credentials either in apt_url or as apt_username/apt_password, not both",
            )
        user, password = params.get("apt_username"), params.get("apt_password")
        if password:
            secrets.append(password)
    if bool(user) != bool(password):
        raise _err("runtime_install_source_invalid", "repository credentials need both a user name and a password")
    suite = params.get("apt_suite") or "./"
    components = list(params.get("apt_components") or [])
    if suite.endswith("/") == bool(components):
        raise _err(
            "runtime_install_source_invalid",
            "a flat repository (apt_suite ending in '/') takes no "
            "apt_components; a suite without '/' needs at least one",
        )
    for word in [suite] + components:
        if not word or any(c.isspace() or c in "[]#" for c in word):
            raise _err("runtime_install_source_invalid", "invalid apt suite or component %r" % word)
    key, signed_by, trusted = (
        params.get("apt_signing_key"),
        params.get("apt_signed_by"),
        bool(params.get("apt_trusted")),
    )
    if key and signed_by:
        raise _err("runtime_install_source_invalid", "give apt_signing_key or apt_signed_by, not both")
    if key and "BEGIN PGP PUBLIC KEY BLOCK" not in key:
        raise _err("runtime_install_source_invalid", "apt_signing_key must be an ASCII-armored OpenPGP public key")
    if not (key or signed_by or trusted):
        raise _err(
            "runtime_install_source_invalid",
            "an apt repository needs apt_signing_key or apt_signed_by (or apt_trusted=true for an unsigned one)",
        )
    if trusted and not (key or signed_by) and mode == "production":
        raise _err(
            "runtime_install_source_not_allowed",
            "production mode installs only from signed repositories (apt_trusted=true is for lab and development)",
        )
    return {
        "url": clean.rstrip("/"),
        "username": user,
        "password": password,
        "suite": suite,
        "components": components,
        "signing_key": key,
        "signed_by": signed_by,
        "trusted": trusted,
    }


def _parse_bundle(params):
    path = params.get("bundle_path") or BUNDLE_TARGET_DIR
    files = params.get("bundle_files")
    checksums = params.get("bundle_checksums") or {}
    if files is not None:
        files = list(files)
        if not files:
            raise _err("runtime_install_source_missing", "the offline bundle has no .deb files")
        for name in files:
            if "/" in name or not name.endswith(".deb") or name.startswith("."):
                raise _err("runtime_install_source_invalid", "bundle file %r is not a .deb file name" % name)
    for name, digest in checksums.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise _err("runtime_install_source_invalid", "bundle_checksums[%r] is not a SHA-256 hex digest" % name)
    return {"path": path, "files": files, "checksums": dict(checksums)}


def apt_source_files(request):
    """``{path: (content, mode)}`` the apt source needs; ``None`` content means "remove our file"."""
    apt, name = request["apt"], request["source_name"]
    base = "stella-%s" % name
    key_path = os.path.join(KEYRING_DIR, base + ".asc")
    keyring = key_path if apt["signing_key"] else apt["signed_by"]
    option = ("signed-by=" + keyring) if keyring else "trusted=yes"
    line = "deb [%s] %s %s" % (option, apt["url"], " ".join([apt["suite"]] + apt["components"]))
    files = {
        os.path.join(SOURCES_DIR, base + ".list"): (
            "# Managed by stellaops.runtime (stella_runtime_install): the configured runtime package source.\n"
            + line.rstrip()
            + "\n",
            0o644,
        )
    }
    if apt["signing_key"]:
        files[key_path] = (apt["signing_key"].strip() + "\n", 0o644)
    # apt uses credentials for plain http only when the machine entry names the scheme (apt_auth.conf(5)).
    auth = (
        "machine %s\nlogin %s\npassword %s\n" % (apt["url"], apt["username"], apt["password"])
        if apt["password"]
        else None
    )
    files[os.path.join(AUTH_DIR, base + ".conf")] = (auth, 0o600)
    return files


def plan_actions(request, observed):
    """What the host needs: ``{"installEngine", "installCompose", "startEngine", "packages"}``."""
    gates = (request["min_engine_version"], request["min_compose_version"])
    engine_ok = bool(observed.get("server")) and version_at_least(observed["server"], gates[0])
    engine_installed = (
        bool(observed.get("client"))
        and bool(observed.get("dockerd"))
        and version_at_least(observed["dockerd"], gates[0])
    )
    compose_ok = bool(observed.get("compose")) and version_at_least(observed["compose"], gates[1])
    install_engine = not (engine_ok or engine_installed)
    install_compose = not compose_ok
    packages = []
    if request["source_type"] == "apt":
        packages = (request["engine_packages"] if install_engine else []) + (
            request["compose_packages"] if install_compose else []
        )
    return {
        "installEngine": install_engine,
        "installCompose": install_compose,
        "startEngine": not engine_ok and request["engine_start"] != "none",
        "packages": packages,
    }


def parse_dpkg_query(text):
    """``dpkg-query -W -f '${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` -> ``{name: version}``
    of the installed packages (architecture qualifiers dropped)."""
    rows = [line.split("\t") for line in (text or "").splitlines()]
    return {f[0].split(":", 1)[0]: f[1] for f in rows if len(f) >= 3 and f[2].startswith("ii")}


def package_changes(before, after):
    """``{name: {"before": v or None, "after": v or None}}`` of packages added, removed or changed."""
    return {
        name: {"before": before.get(name), "after": after.get(name)}
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    }


def source_evidence(request, bundle_files=None):
    """The source as recorded: never a credential, only whether one was configured."""
    src = {"type": request["source_type"]}
    if request["source_type"] == "apt":
        apt = request["apt"]
        src.update(
            url=redact_url(apt["url"]),
            suite=apt["suite"],
            components=apt["components"],
            credentials=bool(apt["password"]),
            signedBy=(
                os.path.join(KEYRING_DIR, "stella-%s.asc" % request["source_name"])
                if apt["signing_key"]
                else apt["signed_by"]
            ),
            trusted=apt["trusted"],
        )
    elif request["source_type"] == "bundle":
        src.update(path=request["bundle"]["path"], files=bundle_files or [])
    return src


def evidence_document(
    request,
    status,
    observed_before,
    plan,
    source,
    started,
    finished,
    packages=None,
    changes=None,
    after=None,
    start=None,
    failure=None,
):
    doc = {
        "schema": SCHEMA,
        "status": status,
        "mode": request["mode"],
        "source": source,
        "gates": {
            "minEngineVersion": request["min_engine_version"],
            "minComposeVersion": request["min_compose_version"],
        },
        "before": {
            "engineVersion": observed_before.get("server"),
            "dockerdVersion": observed_before.get("dockerd"),
            "clientVersion": observed_before.get("client"),
            "composeVersion": observed_before.get("compose"),
        },
        "plan": plan,
        "packages": packages or {},
        "packageChanges": changes or {},
        "engineVersion": (after or observed_before).get("server"),
        "composeVersion": (after or observed_before).get("compose"),
        "engineStart": start,
        "startedAt": started,
        "finishedAt": finished,
    }
    if failure:
        doc["failure"] = failure
    return doc


# ------------------------------------------------------------------------------------------ the host


class RuntimeInstaller:
    """Runs a parsed request on the host. ``run_command(argv, environ_update=None)`` -> ``(rc, out, err)``;
    ``which(name)`` -> path or ``None``."""

    APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def __init__(self, run_command, which, warn, sleep=time.sleep, clock=time.monotonic, root="/"):
        self._run, self.which, self.warn = run_command, which, warn
        self.sleep, self.clock, self.root = sleep, clock, root
        self.secrets = []

    def path(self, absolute):
        return os.path.join(self.root, absolute.lstrip("/"))

    def redact(self, text):
        return redact_text(redact_url(text or ""), self.secrets)

    def run(self, argv, timeout=None, env=None, foreground=False):
        """``argv`` bounded by ``timeout(1)``; ``foreground`` keeps it in the module's process group, for
        commands that touch a terminal (apt under Ansible's ``ssh -tt`` would stop on SIGTTOU otherwise)."""
        bound = self.which("timeout")
        lead = [bound] + (["--foreground"] if foreground else []) + ["--kill-after", "10", str(int(timeout or 0))]
        full = (lead + list(argv)) if bound and timeout else list(argv)
        try:
            return self._run(full, environ_update=env)
        except OSError as exc:
            return 127, "", str(exc)

    # ---- observations
    def observe(self, timeout=15):
        cli = DockerCli(self._run, which=self.which, timeout=timeout)
        seen = {"client": None, "server": None, "compose": None, "dockerd": None}
        dockerd = self.which("dockerd")
        if dockerd:
            rc, out, _err = self.run([dockerd, "--version"], timeout=timeout)
            if rc == 0 and "version" in out:
                seen["dockerd"] = out.split("version", 1)[1].strip().split(",")[0].strip()
        if not self.which("docker"):
            return seen
        seen["client"] = cli.client_version()
        try:
            seen["server"] = cli.version()["server"]
        except StellaError as exc:
            seen["serverError"] = self.redact(exc.reason)
        try:
            seen["compose"] = cli.ask_compose_version()
        except StellaError as exc:
            seen["composeError"] = self.redact(exc.reason)
        return seen

    def installed_packages(self):
        rc, out, _err = self.run(
            ["dpkg-query", "-W", "-f", "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"], timeout=60
        )
        return parse_dpkg_query(out) if rc == 0 else {}

    # ---- sources
    def bundle_files(self, bundle, check_mode):
        directory = self.path(bundle["path"])
        if not os.path.isdir(directory):
            if check_mode:
                return None
            raise _err(
                "runtime_install_source_missing",
                "the offline bundle directory %s does not exist on the target" % bundle["path"],
            )
        names = bundle["files"]
        if names is None:
            names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "*.deb")))
        if not names:
            raise _err("runtime_install_source_missing", "the offline bundle %s has no .deb files" % bundle["path"])
        files = []
        for name in names:
            full = os.path.join(directory, name)
            if not os.path.isfile(full) and check_mode:  # not copied yet: the role's copy ran in check mode
                files.append({"name": name, "sha256": bundle["checksums"].get(name), "present": False})
                continue
            if not os.path.isfile(full):
                raise _err("runtime_install_source_invalid", "bundle file %s is missing in %s" % (name, bundle["path"]))
            with open(full, "rb") as handle:
                digest = (
                    hashlib.file_digest(handle, "sha256").hexdigest()
                    if hasattr(hashlib, "file_digest")
                    else hashlib.sha256(handle.read()).hexdigest()
                )
            if bundle["checksums"].get(name, digest) != digest:
                raise _err(
                    "runtime_install_source_invalid",
                    "bundle file %s has SHA-256 %s, expected %s" % (name, digest, bundle["checksums"][name]),
                )
            entry = {"name": name, "sha256": digest, "size": os.path.getsize(full)}
            rc, out, _e = self.run(["dpkg-deb", "--field", full, "Package", "Version"], timeout=60)
            fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line) if rc == 0 else {}
            if not fields.get("Package"):
                raise _err("runtime_install_source_invalid", "bundle file %s is not a Debian package" % name)
            entry.update(package=fields["Package"], version=fields.get("Version"))
            files.append(entry)
        return files

    def write_apt_source(self, request):
        changed = False
        for path, (content, mode) in sorted(apt_source_files(request).items()):
            full = self.path(path)
            if content is None:
                changed = _unlink(full) or changed
                continue
            data = content.encode("utf-8")
            if read_bytes(full) != data or (os.stat(full).st_mode & 0o777) != mode:
                os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
                atomic_write(full, data, mode=mode)
                changed = True
        return changed

    def apt(self, args, request, what):
        rc, out, err = self.run(
            ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=120", "-o", "Dpkg::Use-Pty=0"] + args,
            timeout=request["install_timeout"],
            env=self.APT_ENV,
            foreground=True,
        )
        problems = [line for line in (err + "\n" + out).splitlines() if line.startswith(("E:", "Err:"))]
        if rc != 0 or (what == "update" and problems):
            detail = self.redact("; ".join(problems[:3]) or one_line(err or out))
            code = "runtime_install_source_unreachable" if what == "update" else "runtime_install_failed"
            raise _err(code, "apt-get %s failed (rc=%d): %s" % (what, rc, detail))
        return out

    def install(self, request, plan, bundle_files):
        """Install from the configured source only: apt sees no other repository."""
        common = ["-o", "Dir::Etc::SourceParts=-", "-o", "APT::Get::List-Cleanup=0"]
        tail = ["-y", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
        tail.append("--install-recommends" if request["install_recommends"] else "--no-install-recommends")
        if request["source_type"] == "apt":
            listing = os.path.join(SOURCES_DIR, "stella-%s.list" % request["source_name"])
            only = ["-o", "Dir::Etc::SourceList=" + listing] + common
            self.apt(only + ["update"], request, "update")
            self.apt(only + tail + ["install"] + plan["packages"], request, "install")
        else:
            paths = [os.path.join(request["bundle"]["path"], f["name"]) for f in bundle_files]
            self.apt(["-o", "Dir::Etc::SourceList=/dev/null"] + common + tail + ["install"] + paths, request, "install")

    # ---- the engine
    def _remove_stale_pidfile(self):
        pidfile = self.path("/var/run/docker.pid")
        pid = (read_bytes(pidfile) or b"").strip()
        if not pid or (pid.isdigit() and (read_bytes("/proc/%s/comm" % pid.decode()) or b"").strip() == b"dockerd"):
            return
        _unlink(pidfile)
        self.warn("removed the stale %s (pid %s is not a running dockerd)" % (pidfile, pid.decode(errors="replace")))

    def start_methods(self, choice):
        systemd = os.path.isdir(self.path("/run/systemd/system"))
        init = self.path("/etc/init.d/docker")
        methods = {
            "systemd": ["systemctl", "start", "docker.service"],
            "init-script": [init, "start"],
            "daemon": [
                "start-stop-daemon",
                "--start",
                "--background",
                "--make-pidfile",
                "--pidfile",
                "/var/run/docker-ssd.pid",
                "--output",
                "/var/log/docker.log",
                "--exec",
                self.which("dockerd") or "/usr/sbin/dockerd",
                "--",
                "-p",
                "/var/run/docker.pid",
            ],
        }
        if choice != "auto":
            return [(choice, methods[choice])]
        if systemd:
            return [("systemd", methods["systemd"])]
        order = [("init-script", methods["init-script"])] if os.path.exists(init) else []
        return order + [("daemon", methods["daemon"])]

    def wait_engine(self, timeout):
        deadline = self.clock() + timeout
        while True:
            seen = self.observe(timeout=10)
            if seen.get("server") or self.clock() >= deadline:
                return seen
            self.sleep(0.5)

    def start_engine(self, request):
        attempts = []
        self._remove_stale_pidfile()
        for method, argv in self.start_methods(request["engine_start"]):
            rc, out, err = self.run(argv, timeout=120)
            attempt = {"method": method, "argv": argv, "rc": rc}
            if rc != 0:
                attempt["error"] = self.redact(one_line(err or out))
                attempts.append(attempt)
                continue
            seen = self.wait_engine(request["start_timeout"])
            attempt["answered"] = bool(seen.get("server"))
            attempts.append(attempt)
            if seen.get("server"):
                return {"method": method, "attempts": attempts}
        raise _err(
            "runtime_install_failed",
            "the Docker engine did not start: %s"
            % "; ".join(
                "%s rc=%s %s" % (a["method"], a["rc"], a.get("error") or "(no answer to docker info)") for a in attempts
            ),
        )

    # ---- the whole task
    def execute(self, request, check_mode=False):
        self.secrets = list(request["secrets"])
        started = utc_timestamp()
        before = self.observe()
        plan = plan_actions(request, before)
        bundle = self.bundle_files(request["bundle"], check_mode) if request["source_type"] == "bundle" else None
        source = source_evidence(request, bundle)
        needed = plan["installEngine"] or plan["installCompose"] or plan["startEngine"]
        if not needed or check_mode:
            status = "satisfied" if not needed else "planned"
            doc = evidence_document(request, status, before, plan, source, started, utc_timestamp())
            return {"changed": bool(needed), "evidence": {"runtimeInstall": doc, "evidencePath": None}, "warnings": []}
        packages_before = self.installed_packages()
        state = {"start": None, "after": None}
        try:
            if plan["installEngine"] or plan["installCompose"]:
                if request["source_type"] == "apt":
                    self.write_apt_source(request)
                self.install(request, plan, bundle)
            if plan["startEngine"] or plan["installEngine"]:
                after = self.observe()
                if not after.get("server"):
                    state["start"] = self.start_engine(request)
            state["after"] = self.wait_engine(request["start_timeout"])
            self.verify(request, state["after"])
        except StellaError as exc:
            self.finish(request, "failed", before, plan, source, started, packages_before, state, exc)
            raise
        doc = self.finish(request, "installed", before, plan, source, started, packages_before, state)
        return {
            "changed": True,
            "evidence": {"runtimeInstall": doc, "evidencePath": request["evidence_path"]},
            "warnings": [],
        }

    @staticmethod
    def verify(request, after):
        problems = []
        for key, gate, name, command in (
            ("server", "min_engine_version", "Docker Engine", "docker info"),
            ("compose", "min_compose_version", "Docker Compose", "docker compose version"),
        ):
            if not after.get(key):
                problems.append("%s does not answer (%s)" % (command, after.get(key + "Error") or "not installed"))
            elif not version_at_least(after[key], request[gate]):
                problems.append("%s %s is older than %s" % (name, after[key], request[gate]))
        if problems:
            raise _err("runtime_install_unverified", "after the install: " + "; ".join(problems))

    def finish(self, request, status, before, plan, source, started, packages_before, state, exc=None):
        packages_after = self.installed_packages()
        wanted = set(request["engine_packages"] + request["compose_packages"] + ["containerd", "runc"])
        wanted |= {f["package"] for f in (source.get("files") or [])}
        doc = evidence_document(
            request,
            status,
            before,
            plan,
            source,
            started,
            utc_timestamp(),
            packages={n: packages_after[n] for n in sorted(wanted) if n in packages_after},
            changes=package_changes(packages_before, packages_after),
            after=state["after"],
            start=state["start"],
            failure=exc.as_dict() if exc else None,
        )
        path = self.path(request["evidence_path"])
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode=0o644)
        if exc is not None:
            exc.evidence = dict(
                exc.evidence,
                runtimeInstall=doc,
                evidencePath=request["evidence_path"],
                changed=bool(doc["packageChanges"]),
            )
        return doc
