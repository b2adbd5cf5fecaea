# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Registry credentials lent by the controller for one pull: a private, temporary Docker client config.

The controller hands the apply the credentials of its own images' registries (module option
``pull_credentials``, ``no_log``: ``{registry: {"username", "password", "source"}}`` or
``{registry: {"identitytoken", "source"}}``). :func:`lent_config` writes them as a Docker config of its
own (``config.json`` holding ``auths`` only, mode 0600) in a new directory (mode 0700, from
``tempfile.mkdtemp``) under a location only the running user reads (:func:`private_base`), yields the
directory for ``DOCKER_CONFIG`` of the pull commands, and removes it when the block ends, also on a
failure, a timeout of the pull or ``SIGTERM``. The user's own Docker config is neither read nor changed.

What the temporary config does not carry: the user's ``proxies``, ``credHelpers``/``credsStore`` and
``auths`` for other registries, ``HttpHeaders`` and CLI plugins' settings. Evidence names each lent
credential's registry and source, never its value (:func:`lent_evidence`). Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import stat
import tempfile
import threading

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_key

# Where root keeps the lent configs (``/run`` is root's own, a tmpfs on most systems); other users get
# ``<tempdir>/stellaops-pull-<uid>``, a directory of their own with mode 0700.
ROOT_BASE = "/run/stellaops-pull"
CONFIG_NAME = "config.json"
PREFIX = "pull-"
# The key Docker's client config keeps Docker Hub's credentials under.
HUB_AUTH_KEY = "https://index.docker.io/v1/"


def lent_entry(registry, entry):
    """One lent entry checked: ``{"username", "password", "source"}`` or ``{"identitytoken", "source"}``;
    a problem names the registry only, never a value."""
    if not isinstance(entry, dict):
        raise StellaError("invalid_request", "pull_credentials[%s] must be a mapping" % registry)
    source = entry.get("source")
    source = str(source) if source else "registry_credentials"
    if entry.get("identitytoken") and not entry.get("password"):
        return {"identitytoken": str(entry["identitytoken"]), "source": source}
    if entry.get("username") and not entry.get("identitytoken"):
        return {"username": str(entry["username"]), "password": str(entry.get("password") or ""), "source": source}
    raise StellaError(
        "invalid_request", "pull_credentials[%s] needs username and password, or identitytoken (one)" % registry
    )


def parse_lent(option):
    """The ``pull_credentials`` option checked: ``{registry: entry or None}`` (``None``: a registry of the
    target's images the controller lends nothing for); ``None`` when the option was not given."""
    if option is None:
        return None
    if not isinstance(option, dict):
        raise StellaError("invalid_request", "pull_credentials must be a mapping of registry to credentials")
    return {str(registry): lent_entry(registry, entry) if entry else None for registry, entry in option.items()}


def _strings(value):
    """Every string in an option's value (mappings: their values), as Ansible lists no_log values."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, (list, tuple, set)):
        return [s for item in value for s in _strings(item)]
    return []


def lent_from_module(module, option="pull_credentials"):
    """The lent credentials of an ``AnsibleModule``'s ``option`` (:func:`parse_lent`), its user names and
    source labels unmasked in the module's output (:func:`mask_lent`)."""
    raw = module.params.get(option)
    if raw is None:
        return None
    others = [
        text
        for name, spec in module.argument_spec.items()
        if spec.get("no_log") and name != option
        for text in _strings(module.params.get(name))
    ]
    mask_lent(module.no_log_values, raw, others)
    return parse_lent(raw)


def lent_only(credentials):
    """The entries of ``credentials`` that lend something."""
    return {registry: entry for registry, entry in (credentials or {}).items() if entry}


def mask_lent(no_log_values, option, other_secrets=()):
    """Adjust a module's ``no_log_values`` for the raw ``pull_credentials`` option: its user names and
    source labels are not secrets (Ansible would mask them wherever they appear), unless they are also a
    secret (a password, a token, or a string of ``other_secrets``); the Basic header values (base64 of
    ``user:password``, what the temporary config holds) are."""
    entries = [entry for entry in (option or {}).values() if isinstance(entry, dict)]
    secret = {str(e[k]) for e in entries for k in ("password", "identitytoken") if e.get(k)}
    secret.update(str(value) for value in other_secrets if isinstance(value, str) and value)
    public = {str(e[k]) for e in entries for k in ("username", "source") if isinstance(e.get(k), str) and e[k]}
    no_log_values.difference_update(public - secret)
    no_log_values.update(
        base64.b64encode(("%s:%s" % (e["username"], e.get("password") or "")).encode("utf-8")).decode("ascii")
        for e in entries
        if e.get("username")
    )


def lent_secrets(credentials):
    """The secret values of the lent credentials, and the base64 forms the config holds (for redaction)."""
    values = []
    for entry in lent_only(credentials).values():
        values.extend(str(entry[key]) for key in ("password", "identitytoken") if entry.get(key))
    values.extend(item.get("auth") or "" for item in config_document(lent_only(credentials))["auths"].values())
    return [value for value in values if value]


def lent_evidence(credentials):
    """What evidence says of the lent credentials: ``[{"registry", "source", "lent"}]`` per registry of the
    target's images (``source`` ``None`` and ``lent`` false where nothing was lent), values never."""
    return [
        {"registry": registry, "source": entry.get("source") if entry else None, "lent": bool(entry)}
        for registry, entry in sorted((credentials or {}).items())
    ]


def config_document(credentials):
    """The temporary Docker config: ``{"auths": {registry: {"auth"} or {"identitytoken"}}}`` (pure)."""
    auths = {}
    for registry, entry in credentials.items():
        key = registry_key(registry)
        key = HUB_AUTH_KEY if key == "docker.io" else key
        if entry.get("identitytoken"):
            auths[key] = {"identitytoken": entry["identitytoken"]}
        else:
            pair = "%s:%s" % (entry["username"], entry.get("password") or "")
            auths[key] = {"auth": base64.b64encode(pair.encode("utf-8")).decode("ascii")}
    return {"auths": auths}


def private_base(uid=None):
    """The location the lent configs are made under, for user ``uid`` (default: the running user)."""
    uid = os.geteuid() if uid is None else uid
    return ROOT_BASE if uid == 0 else os.path.join(tempfile.gettempdir(), "stellaops-pull-%d" % uid)


def ensure_private(base):
    """``base`` as a directory only the running user may enter: created with mode 0700 when absent;
    refused (``io_error``) when it is a symlink, not a directory, owned by another user or open to others."""
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StellaError(
            "io_error", "cannot create %s for the lent registry credentials: %s" % (base, exc.strerror)
        ) from None
    info = os.lstat(base)
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symlink"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory"
    elif info.st_uid != os.geteuid():
        problem = "is owned by uid %d, not by the running user (uid %d)" % (info.st_uid, os.geteuid())
    elif info.st_mode & 0o077:
        problem = "has mode %04o (others may read it; 0700 expected)" % stat.S_IMODE(info.st_mode)
    if problem:
        raise StellaError(
            "io_error",
            "%s %s: the lent registry credentials are not written there; remove it, or set "
            "stella_lend_registry_credentials: false" % (base, problem),
        )


def remove_stale(base):
    """Remove lent configs left by runs whose process is gone (a run killed with ``SIGKILL``)."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    removed = []
    for name in names:
        pid = name[len(PREFIX) :].partition("-")[0] if name.startswith(PREFIX) else ""
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # that run is still going
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        removed.append(name)
    return removed


def write_config(directory, credentials):
    """``config.json`` in ``directory``: created (never opened through a link), mode 0600."""
    path = os.path.join(directory, CONFIG_NAME)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(config_document(credentials), handle)
    return path


@contextlib.contextmanager
def _terminated_as_exit():
    """``SIGTERM`` ends the block as ``SystemExit`` (so its ``finally`` runs); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def lent_config(credentials, base=None):
    """The directory of a temporary Docker config holding ``credentials`` (``None`` when there are none),
    removed when the block ends, however it ends."""
    credentials = lent_only(credentials)
    if not credentials:
        yield None
        return
    base = private_base() if base is None else base
    ensure_private(base)
    remove_stale(base)
    directory = tempfile.mkdtemp(prefix="%s%d-" % (PREFIX, os.getpid()), dir=base)
    try:
        with _terminated_as_exit():
            write_config(directory, credentials)
            yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pull_environment(directory):
    """The environment additions of a pull with the lent config in ``directory`` (``None``: none)."""
    return {"DOCKER_CONFIG": directory} if directory else None
