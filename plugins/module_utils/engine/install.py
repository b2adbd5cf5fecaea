# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Managed runtime install (contract: "Runtime Modes"): Docker Engine and the Compose v2 plugin from a
configured package source only, on Debian-family targets.

Pure decisions (what to install, the package changes, the evidence document) are plain functions;
:class:`RuntimeInstaller` runs a request (``engine.install_request``) on the host through an injected
``run_command(argv)`` (always an argv list). Standard library only.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import one_line
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.install_request import (
    SOURCES_DIR,
    apt_source_files,
    install_error,
    source_evidence,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, read_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import version_at_least

SCHEMA = "stella.runtime-install.v1"


def _unlink(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        return True
    return False


# --------------------------------------------------------------------------------------- pure parts


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
            raise install_error(
                "runtime_install_source_missing",
                "the offline bundle directory %s does not exist on the target" % bundle["path"],
            )
        names = bundle["files"]
        if names is None:
            names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "*.deb")))
        if not names:
            raise install_error(
                "runtime_install_source_missing", "the offline bundle %s has no .deb files" % bundle["path"]
            )
        files = []
        for name in names:
            full = os.path.join(directory, name)
            if not os.path.isfile(full) and check_mode:  # not copied yet: the role's copy ran in check mode
                files.append({"name": name, "sha256": bundle["checksums"].get(name), "present": False})
                continue
            if not os.path.isfile(full):
                raise install_error(
                    "runtime_install_source_invalid", "bundle file %s is missing in %s" % (name, bundle["path"])
                )
            with open(full, "rb") as handle:
                digest = (
                    hashlib.file_digest(handle, "sha256").hexdigest()
                    if hasattr(hashlib, "file_digest")
                    else hashlib.sha256(handle.read()).hexdigest()
                )
            if bundle["checksums"].get(name, digest) != digest:
                raise install_error(
                    "runtime_install_source_invalid",
                    "bundle file %s has SHA-256 %s, expected %s" % (name, digest, bundle["checksums"][name]),
                )
            entry = {"name": name, "sha256": digest, "size": os.path.getsize(full)}
            rc, out, _e = self.run(["dpkg-deb", "--field", full, "Package", "Version"], timeout=60)
            fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line) if rc == 0 else {}
            if not fields.get("Package"):
                raise install_error("runtime_install_source_invalid", "bundle file %s is not a Debian package" % name)
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
            raise install_error(code, "apt-get %s failed (rc=%d): %s" % (what, rc, detail))
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
        raise install_error(
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
            raise install_error("runtime_install_unverified", "after the install: " + "; ".join(problems))

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
