# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Parse and render OCI image references without losing registry/repository:tag identity."""

from __future__ import annotations

import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DIGEST_RE
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

DEFAULT_REGISTRY = "docker.io"
# The names Docker Hub goes by in image references, Docker's client config and credential stores.
HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")
# Where Docker Hub's registry API answers (image references say ``docker.io``).
HUB_API_URL = "https://registry-1.docker.io"
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PATH_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


class ImageRef:
    """An image reference split into registry, repository, tag and digest."""

    __slots__ = ("registry", "repository", "tag", "digest")

    def __init__(self, registry, repository, tag=None, digest=None):
        self.registry = registry
        self.repository = repository
        self.tag = tag
        self.digest = digest

    def __eq__(self, other):
        return isinstance(other, ImageRef) and self.as_tuple() == other.as_tuple()

    def __hash__(self):
        return hash(self.as_tuple())

    def __repr__(self):
        return "ImageRef(%r)" % self.render()

    def as_tuple(self):
        return (self.registry, self.repository, self.tag, self.digest)

    @property
    def name(self):
        """``registry/repository`` (what ``docker pull`` and RepoDigests use)."""
        return "%s/%s" % (self.registry, self.repository)

    def with_digest(self, digest):
        if not DIGEST_RE.match(digest or ""):
            raise StellaError("invalid_image_reference", "digest %r is not sha256:<64 hex>" % (digest,))
        return ImageRef(self.registry, self.repository, self.tag, digest)

    def render(self):
        """``registry/repository[:tag][@sha256:...]``: full identity, never collapsed."""
        text = self.name
        if self.tag:
            text += ":" + self.tag
        if self.digest:
            text += "@" + self.digest
        return text

    def as_dict(self):
        return {"registry": self.registry, "repository": self.repository, "tag": self.tag, "digest": self.digest}


def parse_image_ref(text):
    """Parse ``[registry/]repository[:tag][@digest]``; raise ``StellaError(invalid_image_reference)``."""
    if not isinstance(text, str) or not text or text != text.strip():
        raise StellaError("invalid_image_reference", "image reference %r is empty or has surrounding spaces" % (text,))
    rest, digest = text, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST_RE.match(digest):
            raise StellaError("invalid_image_reference", "image reference %r has an invalid digest %r" % (text, digest))
    registry = DEFAULT_REGISTRY
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, rest = first, remainder
    tag = None
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > last_slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise StellaError("invalid_image_reference", "image reference %r has an invalid tag %r" % (text, tag))
    if not _PATH_RE.match(rest):
        raise StellaError("invalid_image_reference", "image reference %r has an invalid repository %r" % (text, rest))
    if registry == DEFAULT_REGISTRY and "/" not in rest:
        rest = "library/" + rest
    return ImageRef(registry, rest, tag, digest)


def image_id(text):
    """``text`` when it is an image id pin, ``sha256:<64 hex>`` (what ``docker image inspect`` calls
    ``Id``: the digest of the image's configuration, which the engine runs as is), else ``None``.

    A locally loaded image has no registry digest (no RepoDigests): the Compose provider pins it by
    this identity instead (docs/provider.md#local-images)."""
    return text if isinstance(text, str) and DIGEST_RE.match(text) else None


def pinned_digest(text):
    """The immutable identity a pinned reference names: its ``@sha256:`` digest, or the image id of an
    id pin; ``None`` for a reference pinned by neither."""
    return image_id(text) or parse_image_ref(text).digest


def registry_key(name):
    """The one name of a registry, for keying credentials and comparing registries (pure).

    ``https://index.docker.io/v1/``, ``index.docker.io``, ``registry-1.docker.io`` and
    ``registry.hub.docker.com`` are ``docker.io``; a URL's scheme, userinfo and path are dropped; the
    host name is lower-cased, the port kept (``HTTP://Reg.Example:5000/v2/`` -> ``reg.example:5000``).
    """
    text = str(name or "").strip()
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() in ("http", "https"):
        text = rest
    text = text.split("/", 1)[0].rpartition("@")[2]
    if text.startswith("["):
        host, sep, port = text.partition("]")
        host, sep = host + sep, ""
    else:
        host, sep, port = text.partition(":")
    text = host.lower() + sep + port
    return DEFAULT_REGISTRY if text in HUB_NAMES else text


def registry_base_url(registry, insecure_registries=()):
    """Base URL of a registry's HTTP API (plain HTTP for loopback and listed insecure registries).

    Docker Hub, under any of its names (:data:`HUB_NAMES`), answers at :data:`HUB_API_URL`.
    """
    host = registry.split(":", 1)[0]
    if registry_key(registry) == DEFAULT_REGISTRY:
        return HUB_API_URL
    plain = host in ("localhost", "127.0.0.1", "::1", "[::1]") or registry in insecure_registries
    return ("http://" if plain else "https://") + registry


_ARCH_ALIASES = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def oci_architecture(machine):
    """``uname -m`` -> OCI architecture name (``x86_64`` -> ``amd64``)."""
    return _ARCH_ALIASES.get((machine or "").lower(), (machine or "").lower())
