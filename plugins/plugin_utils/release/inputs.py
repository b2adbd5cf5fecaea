# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller inputs every planning step shares: plain JSON data, registry credentials, and the
digest resolution of a release's image references and the signature check of the images its image
policy requires (one resolver, one HTTP session: :func:`resolve_and_verify`)."""

from __future__ import annotations

import json

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.credentials import RegistryCredentials
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import local_images, unresolved_references
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.policy import image_policy
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver


def plain(value, field="release"):
    """Plain JSON types (drops Ansible's tagged/unsafe wrappers); non-JSON values are an error."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise StellaError("release_invalid", "%s is not plain JSON data (%s)" % (field, exc), phase="plan")


def load_credentials(raw):
    """The registry credentials of planning: the task's ``registry_credentials`` (``password_file`` read
    on the controller), then Docker's client config (:class:`RegistryCredentials`)."""
    return RegistryCredentials(raw or {})


def resolve_digests(release, credentials, insecure, pre_resolved, resolve, timeout, transport=None):
    """``(resolved map, resolution evidence)`` (:func:`resolve_and_verify` without an image policy)."""
    resolved, evidence, _verdicts = resolve_and_verify(
        release, credentials, insecure, pre_resolved, resolve, timeout, transport=transport
    )
    return resolved, evidence


def resolve_and_verify(release, credentials, insecure, pre_resolved, resolve, timeout, job_policy=None, transport=None):
    """``(resolved map, resolution evidence, signature verdicts)``.

    The image policy (the release's ``imagePolicy`` under the job's ``job_policy``, policy.py) is checked
    first, before any registry request (``image_policy_invalid``). Tags are resolved to digests
    (``image_unresolved``); then, with the same resolver (its session, credentials and tokens), each image
    the policy requires is checked for a verified signature of its pinned digest (signatures.py:
    ``image_unsigned``, ``image_signature_invalid``, ``registry_unreachable``, ``registry_auth_failed``).
    ``verdicts`` is ``{reference: verdict}``, ``{}`` without a policy (and then nothing more is asked).
    A reference pinned by a locally loaded image's id (``plan.LOCAL_IMAGE_KEY``) is not looked up: its
    evidence says so (``source: local``, ``resolved: false``, ``imageId``)."""
    policy = image_policy(release, job_policy)
    resolved = dict(pre_resolved)
    evidence = {}
    verdicts = {}
    pending = [ref for ref in unresolved_references(release) if ref not in resolved]
    if pending and not resolve:
        raise StellaError(
            "image_unresolved",
            "image %s has no digest and resolve=false" % pending[0],
            phase="resolve",
            evidence={"image": pending[0]},
        )
    with DigestResolver(credentials, insecure, transport=transport, timeout=timeout) as resolver:
        for ref in pending:
            info = resolver.resolve(ref)
            resolved[ref] = info["digest"]
            evidence[ref] = info
        if policy is not None:
            # pylint: disable-next=import-outside-toplevel  # only a release with a policy pays for it
            from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.signatures import verify_images

            verdicts = verify_images(resolver, policy, release, resolved)
    for ref, local in sorted(local_images(release).items()):
        evidence[ref] = {
            "reference": ref,
            "image": local,
            "digest": local,
            "imageId": local,
            "resolved": False,
            "source": "local",
        }
    for ref in sorted(pre_resolved):
        evidence.setdefault(ref, {"reference": ref, "digest": pre_resolved[ref], "resolved": False, "source": "input"})
    return resolved, evidence, verdicts
