# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This plugin_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The image signature policy of a release (docs/trust.md "Image signature policy").

The release's ``imagePolicy`` and the job's ``image_policy`` (whose top-level keys win) are merged and
checked here, before any registry request: the types, the component names, and every public key file
(read and parsed on the controller). :func:`image_policy` returns ``None`` when neither says anything,
so a release without a policy costs nothing. The result keeps the key objects for the signature check
(signatures.py) and describes itself with each key's path and fingerprint only, never its material.
Every problem is ``StellaError("image_policy_invalid")``.
"""

from __future__ import annotations

import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

POLICY_FIELD = "imagePolicy"
POLICY_KEYS = ("keys", "require", "identity", "signatureDirectory", "components")
COMPONENT_KEYS = ("require", "keys", "identity")
MAX_KEYS = 32


def _invalid(reason):
    return StellaError("image_policy_invalid", "image policy: %s" % reason, phase="plan")


def _check_text(value, where):
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\x00" in value:
        raise _invalid("%s must be a non-empty one-line string, not %r" % (where, type(value).__name__))
    return value


def _check_bool(value, where):
    if not isinstance(value, bool):
        raise _invalid("%s must be true or false, not %r" % (where, value))
    return value


def _check_keys(value, where):
    if not isinstance(value, list):
        raise _invalid("%s must be a list of public key file paths" % where)
    if len(value) > MAX_KEYS:
        raise _invalid("%s names %d keys, more than %d" % (where, len(value), MAX_KEYS))
    return [os.path.expanduser(_check_text(item, "%s[%d]" % (where, index))) for index, item in enumerate(value)]


def merged_policy(release_policy, job_policy):
    """The policy in force: the release's ``imagePolicy`` with the job's top-level keys over it; ``None``
    when neither is given (or both are empty)."""
    for value, where in ((release_policy, POLICY_FIELD), (job_policy, "image_policy")):
        if value is not None and not isinstance(value, dict):
            raise _invalid("%s must be a mapping, not %s" % (where, type(value).__name__))
    merged = dict(release_policy or {})
    merged.update(job_policy or {})
    return merged or None


class ComponentRule:
    """What one component needs: ``require``, the trusted key paths and the identity (``None``: the
    component's own repository)."""

    __slots__ = ("require", "keys", "identity")

    def __init__(self, require, keys, identity):
        self.require = require
        self.keys = keys
        self.identity = identity


class ImagePolicy:
    """A checked image policy: ``rules`` by component name, the loaded ``keys`` by path, and the offline
    ``directory`` (``None``: signatures are read from the registries)."""

    def __init__(self, rules, keys, directory):
        self.rules = rules
        self.keys = keys
        self.directory = directory

    def required(self):
        """Whether any component must carry a verified signature."""
        return any(rule.require for rule in self.rules.values())

    def keys_of(self, rule):
        """``[(path, PublicKey)]`` a component trusts."""
        return [(path, self.keys[path]) for path in rule.keys]

    def describe(self):
        """The policy as plain JSON data: per component ``require``, ``identity`` and its keys' ``path``
        and ``fingerprint`` (no key material)."""
        return {
            "signatureDirectory": self.directory,
            "components": {
                name: {
                    "require": rule.require,
                    "identity": rule.identity,
                    "keys": [{"path": path, "fingerprint": self.keys[path].fingerprint} for path in rule.keys],
                }
                for name, rule in sorted(self.rules.items())
            },
        }


def _load_keys(paths):
    # pylint: disable-next=import-outside-toplevel  # cryptography is loaded only when a policy names a key
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import load_public_key

    loaded = {}
    for path in paths:
        if path in loaded:
            continue
        if not os.path.isfile(path):
            raise _invalid("the public key %s is not a file on the controller" % path)
        try:
            loaded[path] = load_public_key(path, code="image_policy_invalid")
        except StellaError as exc:
            raise StellaError(
                "image_policy_invalid",
                "image policy: key %s: %s" % (path, exc.reason) if path not in exc.reason else exc.reason,
                phase="plan",
            ) from None
    return loaded


def image_policy(release, job_policy=None):
    """The :class:`ImagePolicy` of ``release`` (its ``imagePolicy``) and the job's ``job_policy``, or
    ``None`` when there is none. Checks every field and loads every key before anything else happens."""
    raw = merged_policy(release.get(POLICY_FIELD), job_policy)
    if raw is None:
        return None
    for key in raw:
        if key not in POLICY_KEYS:
            raise _invalid("unknown field %r (%s)" % (key, ", ".join(POLICY_KEYS)))
    top_keys = _check_keys(raw["keys"], "keys") if raw.get("keys") is not None else []
    top_require = _check_bool(raw["require"], "require") if raw.get("require") is not None else None
    top_identity = _check_text(raw["identity"], "identity") if raw.get("identity") is not None else None
    directory = None
    if raw.get("signatureDirectory") is not None:
        directory = os.path.expanduser(_check_text(raw["signatureDirectory"], "signatureDirectory"))
        if not os.path.isdir(directory):
            raise _invalid("signatureDirectory %s is not a directory on the controller" % directory)
    overrides = raw.get("components") if raw.get("components") is not None else {}
    if not isinstance(overrides, dict):
        raise _invalid("components must be a mapping of component names")
    names = [c.get("name") for c in release.get("components") or [] if isinstance(c, dict)]
    unknown = sorted(str(name) for name in overrides if name not in names)
    if unknown:
        raise _invalid(
            "components names %s, which the release does not have (%s)" % (", ".join(unknown), ", ".join(names))
        )
    rules, named = {}, list(top_keys)
    for name in names:
        override = overrides.get(name) if overrides.get(name) is not None else {}
        if not isinstance(override, dict):
            raise _invalid("components.%s must be a mapping (require, keys, identity)" % name)
        for key in override:
            if key not in COMPONENT_KEYS:
                raise _invalid("components.%s: unknown field %r (%s)" % (name, key, ", ".join(COMPONENT_KEYS)))
        where = "components.%s" % name
        keys = _check_keys(override["keys"], where + ".keys") if override.get("keys") is not None else top_keys
        if override.get("require") is not None:
            require = _check_bool(override["require"], where + ".require")
        else:
            require = top_require if top_require is not None else bool(keys)
        identity = _check_text(override["identity"], where + ".identity") if override.get("identity") else top_identity
        named.extend(keys)
        if require and not keys:
            raise _invalid(
                "component %s must be signed but the policy names no key to trust: give keys (PEM public key "
                "files) or require: false" % name
            )
        rules[name] = ComponentRule(require, list(dict.fromkeys(keys)) if require else [], identity)
    # every key the policy names is read, a required component's or not: a wrong path is found now
    return ImagePolicy(rules, _load_keys(named), directory)
