# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Compose project names, slots and traffic roles (pure functions, stdlib only).

Project names are stable for (tenant, environment, target, application, slot), never random, and
always valid for Compose (``^[a-z0-9][a-z0-9_-]*$``, at most 63 characters).

Derived names join the cleaned parts with ``_``. A cleaned part never contains ``_``, so when no
cleaning was lossy the name is injective. When cleaning lost information (lower-casing, replaced
characters) or the name had to be cut, ``__`` plus 12 hex of the SHA-256 of the raw tuple is appended;
``__`` never occurs in a lossless name, so lossy and lossless names never collide either.
"""

from __future__ import annotations

import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    MAX_PROJECT_LENGTH,
    PROJECT_RE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

NAMED_SLOTS = ("active", "canary", "blue", "green")
_SLOT_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}\Z")
_HASH_LEN = 12

DEFAULT_SLOTS = {
    "rolling": "active",
    "all-at-once": "active",
    "canary": "canary",
    "blue-green": "green",
    "a-b": "green",
}


def _clean_part(text):
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    return cleaned or "x"


def _tuple_hash(parts):
    return digest_json(list(parts))[len("sha256:") :][:_HASH_LEN]


def bound_name(name, raw_parts, lossy):
    """Append ``__<hash12>`` of the raw tuple when ``lossy`` or too long; cut to 63 characters."""
    if not lossy and len(name) <= MAX_PROJECT_LENGTH:
        return name
    suffix = "__" + _tuple_hash(raw_parts)
    head = name[: MAX_PROJECT_LENGTH - len(suffix)].rstrip("_-")
    return (head or "x") + suffix


def derive_project_name(tenant, environment, target_id, application, slot):
    """Stable Compose project name for the tuple; the ``active`` slot adds no suffix."""
    raw = [tenant, environment, target_id, application] + ([] if slot == "active" else [slot])
    parts = [_clean_part(part) for part in raw]
    lossy = parts != raw
    return bound_name("_".join(parts), ["derived"] + raw, lossy)


def slot_suffix_present(project, slot):
    return project.endswith("-" + slot) or project.endswith("_" + slot)


def explicit_project_name(project, slot):
    """An explicit project with the non-active slot appended unless it already ends with it."""
    if not PROJECT_RE.match(project or "") or len(project) > MAX_PROJECT_LENGTH:
        raise StellaError(
            "release_invalid",
            "release input field projectName %r is not a valid Compose project name" % (project,),
            phase="plan",
            evidence={"field": "projectName"},
        )
    if slot == "active" or slot_suffix_present(project, slot):
        return project
    return bound_name(project + "-" + slot, ["explicit", project, slot], False)


def project_name(release, slot):
    if release.get("projectName"):
        return explicit_project_name(release["projectName"], slot)
    return derive_project_name(
        release["tenant"], release["environment"], release["target"]["id"], release["application"], slot
    )


def _check_slot(slot, field):
    if not isinstance(slot, str) or not _SLOT_RE.match(slot):
        raise StellaError(
            "release_invalid",
            "release input field %s %r is not a valid slot" % (field, slot),
            phase="plan",
            evidence={"field": field},
        )
    return slot


def select_slot(release):
    """``(slot, source)``: explicit slot, then strategy config slot / deployment.slot / variantId,
    then the strategy default. A slot outside active/canary/blue/green is an A/B variant id and is
    only accepted for the ``a-b`` strategy or when it came from a ``variantId`` field."""
    config = release.get("strategyConfig") or {}
    candidates = (
        ("slot", release.get("slot")),
        ("variantId", release.get("variantId")),
        ("strategyConfig.slot", config.get("slot")),
        ('strategyConfig["deployment.slot"]', config.get("deployment.slot")),
        ("strategyConfig.variantId", config.get("variantId")),
    )
    for field, value in candidates:
        if value is None:
            continue
        _check_slot(value, field)
        if value not in NAMED_SLOTS and release["strategy"] != "a-b" and not field.endswith("variantId"):
            raise StellaError(
                "release_invalid",
                "release input field %s %r is not active, canary, blue or green (variant ids need "
                "strategy a-b or variantId)" % (field, value),
                phase="plan",
                evidence={"field": field},
            )
        return value, field
    return DEFAULT_SLOTS[release["strategy"]], "default:" + release["strategy"]


def traffic_role(slot, active_slot=None):
    """active->active, canary->canary, blue/green->standby (active when it is ``activeSlot``),
    variant id->variant."""
    if slot == "active":
        return "active"
    if slot == "canary":
        return "canary"
    if slot in ("blue", "green"):
        return "active" if slot == active_slot else "standby"
    return "variant"


def active_slot(release):
    return release.get("activeSlot") or (release.get("strategyConfig") or {}).get("activeSlot")
