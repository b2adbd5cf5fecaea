# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This plugin_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Registry credentials on the controller: the explicit ones a play gives, then Docker's client config.

:class:`RegistryCredentials` answers "which credentials for registry R, and where did they come from"
for planning (digest resolution) and for the target's preflight (the action plugins hand it the one
registry's entry). The lookup order is the docker CLI's, with explicit credentials first:

1. ``registry_credentials`` given to the task (``stella_registry_credentials``): ``{username, password}``
   or ``{username, password_file}`` (read here) or ``{identitytoken}``; source ``registry_credentials``;
2. Docker's client config (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``):
   the registry's ``credHelpers`` entry, else ``credsStore`` (the ``docker-credential-<name> get``
   protocol; source ``docker-config:credHelpers:<name>`` / ``docker-config:credsStore:<name>``), else its
   ``auths`` entry (base64 ``auth`` or ``identitytoken``; source ``docker-config:auths``).

The Docker config is parsed with the ``docker`` SDK's ``auth.load_config`` (imported the first time a
registry is looked up there); credential helpers are run here, ``docker-credential-<name> get`` found on
the ``PATH`` of the environment given, the server URL on stdin. Docker Hub is one registry under any of its names (``docker.io``,
``index.docker.io``, ``registry-1.docker.io``, ``https://index.docker.io/v1/``).

An entry is ``{"username", "password"}`` or ``{"identitytoken"}`` plus ``"source"`` (a label, never a
secret). :meth:`RegistryCredentials.secrets` lists every secret value looked up, for redaction.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import COMPOSE_PREFLIGHT
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (
    DEFAULT_REGISTRY,
    parse_image_ref,
    registry_key,
)

# The server URL credential stores keep Docker Hub's credentials under.
HUB_SERVER_URL = "https://index.docker.io/v1/"
TOKEN_USERNAME = "<token>"
# What every credential helper says when it has nothing for a server (docker-credential-helpers).
NOT_FOUND = "credentials not found in native keychain"
# How long a helper (and whatever it starts) may take to answer, in seconds; and the most of its stdout
# read (an answer is a small JSON object; ECR's and GCR's are a few KiB). Of stderr, only the first
# STDERR_KEPT bytes are looked at (for NOT_FOUND); the rest is read and dropped.
HELPER_TIMEOUT = 30
MAX_HELPER_OUTPUT = 1024 * 1024
STDERR_KEPT = 4096


def _docker_auth():
    """The ``docker`` SDK's ``auth`` module (imported at first use: only a Docker config needs it)."""
    try:
        from docker import auth  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise StellaError(
            "invalid_request",
            "reading Docker's client config needs the docker SDK on the controller "
            "(pip install -r requirements.txt of stellaops.runtime): %s" % exc,
        )
    return auth


def docker_config_path(environ=None):
    """Where the docker CLI reads its config: ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``;
    ``None`` when that file does not exist."""
    environ = os.environ if environ is None else environ
    directory = environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    path = os.path.join(directory, "config.json")
    return path if os.path.isfile(path) else None


def explicit_entry(registry, entry):
    """One ``registry_credentials`` entry checked as the target checks it (``engine.registry.credential_entry``),
    after ``password_file`` was read here on the controller."""
    if isinstance(entry, dict) and entry.get("password") is None and entry.get("password_file"):
        try:
            with open(os.path.expanduser(entry["password_file"]), "r", encoding="utf-8") as handle:
                password = handle.read().rstrip("\r\n")
        except OSError as exc:
            raise StellaError(
                "invalid_request",
                "registry_credentials[%s].password_file cannot be read (%s)" % (registry, exc.strerror),
            )
        entry = dict({k: v for k, v in entry.items() if k != "password_file"}, password=password)
    # imported here: it brings urllib.request (about 0.02 s), which an apply task without explicit
    # credentials never needs
    from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import credential_entry  # pylint: disable=import-outside-toplevel

    return credential_entry(registry, entry)


class RegistryCredentials:
    """Credentials per registry: explicit first, then Docker's client config (see the module doc).

    ``explicit`` is the task's ``registry_credentials``; ``config_path`` the Docker config to read
    (default :func:`docker_config_path`; ``False``: none); ``environ`` the environment the credential
    helpers run with (default this process's).
    """

    def __init__(self, explicit=None, config_path=None, environ=None):
        self.explicit = {}
        for registry, entry in (explicit or {}).items():
            self.explicit[registry_key(registry)] = explicit_entry(registry, entry)
        self.environ = dict(os.environ if environ is None else environ)
        self.config_path = docker_config_path(self.environ) if config_path is None else (config_path or None)
        self._config = None
        self._raw = None
        self._found = {}
        self.warnings = []
        self._warned = {}

    def __bool__(self):
        return bool(self.explicit) or bool(self.config_path)

    def get(self, registry):
        """The entry for ``registry`` (a copy) or ``None``; looked up once per registry."""
        key = registry_key(registry)
        if key not in self._found:
            self._found[key] = self.explicit.get(key) or self._from_docker_config(key)
        found = self._found[key]
        return dict(found) if found else None

    def for_registries(self, registries):
        """``{registry: entry}`` for those of ``registries`` that have credentials (keys as given)."""
        out = {}
        for registry in registries:
            entry = self.get(registry)
            if entry:
                out[registry] = entry
        return out

    def warning_for(self, registry):
        """The warning looking ``registry`` up gave (a ``credsStore`` whose helper is not installed), or
        ``None``: a failure for want of credentials names it."""
        return self._warned.get(registry_key(registry))

    def secrets(self):
        """Every secret value given or looked up (for redaction)."""
        values = []
        for entry in list(self.explicit.values()) + [e for e in self._found.values() if e]:
            values.extend(v for k, v in entry.items() if k in ("password", "identitytoken") and v)
        return values

    # -- Docker's client config ------------------------------------------------------------------

    def _load(self):
        if self._config is None:
            auth = _docker_auth()
            try:
                self._config = auth.load_config(config_path=self.config_path, credstore_env=self.environ)
            except Exception as exc:  # the SDK raises its own InvalidConfigFile / ValueError / binascii errors
                raise StellaError(
                    "invalid_request",
                    "Docker client config %s cannot be read: %s" % (self.config_path, type(exc).__name__),
                )
        return self._config

    def _mentions(self, key):
        """Whether the Docker config can hold credentials for ``key``: a ``credsStore``, a ``credHelpers``
        entry or an ``auths`` entry for it (a config without those sections is the legacy auths-only
        form). Read as plain JSON once, so a task whose registry the config does not name never imports
        the docker SDK (about 0.14 s in every apply task on a controller that has a Docker config)."""
        if self._raw is None:
            try:
                with open(self.config_path, "r", encoding="utf-8") as handle:
                    raw = json.load(handle)
            except (OSError, ValueError) as exc:
                raise StellaError(
                    "invalid_request",
                    "Docker client config %s cannot be read: %s" % (self.config_path, type(exc).__name__),
                )
            self._raw = raw if isinstance(raw, dict) else {}
        raw = self._raw
        sections = [raw.get(name) for name in ("auths", "credHelpers", "credsStore")]
        names = list(raw) if not any(sections) else list(raw.get("auths") or {}) + list(raw.get("credHelpers") or {})
        return bool(raw.get("credsStore")) or key in {registry_key(name) for name in names}

    def _from_docker_config(self, key):
        if not self.config_path or not self._mentions(key):
            return None
        config = self._load()
        helpers = {registry_key(name): helper for name, helper in (config.cred_helpers or {}).items()}
        if key in helpers:
            found = self._from_helper(helpers[key], key, "docker-config:credHelpers:%s" % helpers[key])
            if found:
                return found
        elif config.creds_store:
            found = self._from_helper(config.creds_store, key, "docker-config:credsStore:%s" % config.creds_store)
            if found:
                return found
        for name, entry in (config.auths or {}).items():
            if registry_key(name) != key or not entry:
                continue
            if entry.get("IdentityToken"):
                return {"identitytoken": entry["IdentityToken"], "source": "docker-config:auths"}
            if entry.get("username"):
                return {
                    "username": entry["username"],
                    "password": entry.get("password") or "",
                    "source": "docker-config:auths",
                }
        return None

    def _from_helper(self, helper, key, source):
        """``docker-credential-<helper> get`` for the registry (Docker Hub is asked by its index URL)."""
        program = "docker-credential-" + helper
        exe = shutil.which(program, path=self.environ.get("PATH", os.defpath))
        if exe is None:
            if source.startswith("docker-config:credsStore:"):
                # the default store of a config copied from another machine (e.g. ``desktop``): planning
                # goes on without stored credentials and says so
                self._warned[key] = (
                    "Docker client config %s names credsStore %r but %s is not installed: no "
                    "stored credentials for %s" % (self.config_path, helper, program, key)
                )
                self.warnings.append(self._warned[key])
                return None
            raise StellaError(
                "registry_auth_failed",
                "Docker client config %s names credential helper %s for %s, "
                "and it is not on PATH: install it or remove the credHelpers entry" % (self.config_path, program, key),
            )
        servers = [HUB_SERVER_URL] if key == DEFAULT_REGISTRY else [key, "https://" + key]
        for server in servers:
            data = self._helper_get(exe, program, server, key)
            if data is None:
                continue
            if data.get("Username") == TOKEN_USERNAME:
                return {"identitytoken": data.get("Secret") or "", "source": source}
            return {"username": data.get("Username") or "", "password": data.get("Secret") or "", "source": source}
        return None

    def _helper_get(self, exe, program, server, key):
        """One ``get`` of the credential-helper protocol: the server URL on stdin, JSON
        ``{ServerURL, Username, Secret}`` on stdout; ``None`` when the helper has nothing for it.

        Nothing the helper prints reaches an error (a failing helper may print the secret it read): a
        failure names the helper, the registry and the exit status only. The helper and whatever it
        starts get ``HELPER_TIMEOUT`` seconds in all, in a process group of their own that is killed
        when the time is up or the answer grows beyond ``MAX_HELPER_OUTPUT`` bytes."""
        try:
            process = subprocess.Popen(  # pylint: disable=consider-using-with
                [exe, "get"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environ,
                start_new_session=True,
            )
        except OSError as exc:
            raise StellaError(
                "registry_auth_failed",
                "credential helper %s for %s could not be started: %s"
                % (program, key, exc.strerror or type(exc).__name__),
            )
        stdout, stderr, problem = b"", b"", "did not answer"
        try:
            stdout, stderr, problem = _exchange(process, server.encode("utf-8"))
        except OSError as exc:
            problem = "could not be read: %s" % (exc.strerror or type(exc).__name__)
        finally:
            if problem:  # a bound passed: the helper and everything it started (a helper that answered in
                _kill_group(process)  # time may leave a daemon of its own, such as gpg-agent, running)
            for pipe in (process.stdin, process.stdout, process.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass  # stdin of a helper that exited without reading it
            process.wait()
        if problem:
            raise StellaError("registry_auth_failed", "credential helper %s for %s %s" % (program, key, problem))
        if process.returncode != 0:
            if NOT_FOUND.encode() in stdout[:STDERR_KEPT] or NOT_FOUND.encode() in stderr:
                return None
            raise StellaError(
                "registry_auth_failed",
                "credential helper %s failed for %s (exit %d; what it printed "
                "is not shown: it may hold a secret)" % (program, key, process.returncode),
            )
        try:
            data = json.loads(stdout.decode("utf-8"))
        except ValueError:
            raise StellaError("registry_auth_failed", "credential helper %s returned no JSON for %s" % (program, key))
        if not isinstance(data, dict) or not (data.get("Username") or data.get("Secret")):
            return None
        return data


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass  # the group is gone


def _exchange(process, data):
    """``(stdout, stderr kept, problem)``: ``data`` written to the helper's stdin, its output read until
    both pipes close, within ``HELPER_TIMEOUT`` seconds and ``MAX_HELPER_OUTPUT`` bytes of stdout;
    ``problem`` says which bound was passed (``None`` when none was)."""
    deadline = time.monotonic() + HELPER_TIMEOUT
    try:
        process.stdin.write(data)
        process.stdin.close()
    except OSError:
        pass  # a helper that does not read its stdin says so in its exit status
    out, err, size = [], [], 0
    kept = 0
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        selector.register(process.stderr, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", b"", "did not answer within %g s" % HELPER_TIMEOUT
            for item, _events in selector.select(left):
                chunk = os.read(item.fd, 65536)
                if not chunk:
                    selector.unregister(item.fileobj)
                elif item.fileobj is process.stdout:
                    size += len(chunk)
                    if size > MAX_HELPER_OUTPUT:
                        return b"", b"", "answered more than %d MiB" % (MAX_HELPER_OUTPUT // (1024 * 1024))
                    out.append(chunk)
                elif kept < STDERR_KEPT:
                    err.append(chunk[: STDERR_KEPT - kept])
                    kept += len(err[-1])
    left = deadline - time.monotonic()
    try:
        process.wait(max(left, 0.001))
    except subprocess.TimeoutExpired:
        return b"", b"", "did not answer within %g s" % HELPER_TIMEOUT
    return b"".join(out), b"".join(err), None


# -- the target's preflight --------------------------------------------------------------------------


def preflight_registries(preflight):
    """The registries a preflight's options ask: the one of ``registry_url`` and the one of its image
    (the ``compose.preflight`` payload read as the target reads it, ``COMPOSE_PREFLIGHT``); none when
    registry reachability is skipped. Options the preflight refuses give none: it says what is wrong."""
    try:
        request = COMPOSE_PREFLIGHT.parse(preflight.get("payload"), preflight)
        if str(request.get("registry_reachability_mode") or "").lower() == "skip":
            return []
        found = [registry_key(preflight["registry_url"])] if preflight.get("registry_url") else []
        if request.get("image_reference"):
            found.append(parse_image_ref(request["image_reference"]).registry)
    except StellaError:
        return []
    return sorted(set(found))


def with_preflight_credentials(preflight, environ=None, config_path=None):
    """``(preflight options, secrets, warnings)``: the options with ``registry_credentials`` holding, for
    the registries the preflight asks only, the entry :class:`RegistryCredentials` finds (the explicit
    ``registry_credentials`` given in the options first, then Docker's client config on this
    controller). Other registries' credentials never travel to the target."""
    options = dict(preflight)
    credentials = RegistryCredentials(
        options.pop("registry_credentials", None) or {}, config_path=config_path, environ=environ
    )
    entries = credentials.for_registries(preflight_registries(options))
    if entries:
        options["registry_credentials"] = entries
    return options, credentials.secrets(), credentials.warnings
