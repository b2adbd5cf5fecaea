"""Push N distinct tags of one small image into a lab registry over the registry HTTP API (bench helper).

Every tag ``<repository>:t0000``.. is its own Docker schema 2 manifest: one small gzipped layer shared by
all of them, and a config blob per tag that differs only in a label (``stella.bench.tag``), so N tags
are N distinct manifest digests. The bytes are built deterministically, so each tag's digest is known
before anything is pushed, and pushing is idempotent: a tag whose manifest the registry already
answers with the expected digest is skipped (one ``HEAD`` per tag), and only the blobs a missing tag
needs are uploaded. Uses ``requests`` directly (never through a proxy), a few threads at a time.

Usage as a script: .venv/bin/python bench/registry_tags.py REGISTRY [--repository R] [--count N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import hashlib
import io
import json
import tarfile
import threading
import time
import urllib.parse

import requests

MEDIA_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MEDIA_CONFIG = "application/vnd.docker.container.image.v1+json"
MEDIA_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DEFAULT_REPOSITORY = "stella/scale"
LABEL = "stella.bench.tag"
THREADS = 8


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tag_name(index, count):
    """``t0000`` .. (at least four digits, more when ``count`` needs them)."""
    return "t%0*d" % (max(4, len(str(max(count - 1, 0)))), index)


def canonical(document):
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def layer():
    """``(gzipped tar bytes, diff id)`` of the shared layer: one file, fixed metadata, gzip mtime 0."""
    content = b"stella scale bench layer\n"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("stella-scale.txt")
        info.size, info.mtime, info.mode, info.uid, info.gid = len(content), 0, 0o644, 0, 0
        info.uname = info.gname = "root"
        tar.addfile(info, io.BytesIO(content))
    data = raw.getvalue()
    return gzip.compress(data, compresslevel=9, mtime=0), sha256(data)


def image_set(count, repository=DEFAULT_REPOSITORY):
    """``(layer bytes, {tag: (config bytes, manifest bytes, manifest digest)})`` for ``count`` tags."""
    layer_bytes, diff_id = layer()
    layer_ref = {"mediaType": MEDIA_LAYER, "size": len(layer_bytes), "digest": sha256(layer_bytes)}
    images = {}
    for index in range(count):
        tag = tag_name(index, count)
        config = canonical(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Labels": {LABEL: "%s:%s" % (repository, tag)}},
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            }
        )
        manifest = canonical(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": {"mediaType": MEDIA_CONFIG, "size": len(config), "digest": sha256(config)},
                "layers": [layer_ref],
            }
        )
        images[tag] = (config, manifest, sha256(manifest))
    return layer_bytes, images


class RegistryPusher:
    """Blob and manifest pushes to one registry over plain HTTP (the lab's registries)."""

    def __init__(self, registry, repository=DEFAULT_REPOSITORY, timeout=30.0):
        self.base = "http://%s/v2/%s" % (registry, repository)
        self.timeout = timeout
        self._local = threading.local()
        self.requests = 0
        self._lock = threading.Lock()

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False  # the lab's addresses are never proxied
        return session

    def _call(self, method, url, **kw):
        with self._lock:
            self.requests += 1
        kw.setdefault("timeout", self.timeout)
        kw.setdefault("allow_redirects", False)
        return self._session().request(method, url, **kw)

    def tag_digest(self, tag):
        """The digest the registry answers for ``tag`` (``HEAD``), or ``None`` (404)."""
        answer = self._call("HEAD", "%s/manifests/%s" % (self.base, tag), headers={"Accept": MEDIA_MANIFEST})
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise RuntimeError("HEAD %s/manifests/%s: HTTP %d" % (self.base, tag, answer.status_code))
        return answer.headers.get("Docker-Content-Digest")

    def ensure_blob(self, data):
        digest = sha256(data)
        answer = self._call("HEAD", "%s/blobs/%s" % (self.base, digest))
        if answer.status_code == 200:
            return False
        started = self._call("POST", "%s/blobs/uploads/" % self.base)
        if started.status_code != 202 or not started.headers.get("Location"):
            raise RuntimeError("POST %s/blobs/uploads/: HTTP %d" % (self.base, started.status_code))
        location = urllib.parse.urljoin(self.base + "/", started.headers["Location"])
        location += ("&" if "?" in location else "?") + urllib.parse.urlencode({"digest": digest})
        done = self._call("PUT", location, data=data, headers={"Content-Type": "application/octet-stream"})
        if done.status_code != 201:
            raise RuntimeError("PUT blob %s: HTTP %d %s" % (digest, done.status_code, done.text[:200]))
        return True

    def put_manifest(self, tag, manifest, expected):
        answer = self._call(
            "PUT", "%s/manifests/%s" % (self.base, tag), data=manifest, headers={"Content-Type": MEDIA_MANIFEST}
        )
        if answer.status_code != 201:
            raise RuntimeError(
                "PUT %s/manifests/%s: HTTP %d %s" % (self.base, tag, answer.status_code, answer.text[:200])
            )
        got = answer.headers.get("Docker-Content-Digest")
        if got != expected:
            raise RuntimeError("PUT %s/manifests/%s: registry digest %s, expected %s" % (self.base, tag, got, expected))


def ensure_tags(registry, count, repository=DEFAULT_REPOSITORY, threads=THREADS):
    """Make ``repository:t0000``.. exist in ``registry`` with their expected digests.

    Returns ``{"expected": {tag: digest}, "registry": {tag: digest the registry answers}, "pushed": n,
    "present": n, "requests": n, "seconds": s}``; raises ``RuntimeError`` on any unexpected answer.
    """
    started = time.perf_counter()
    layer_bytes, images = image_set(count, repository)
    pusher = RegistryPusher(registry, repository)
    tags = list(images)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        found = dict(zip(tags, pool.map(pusher.tag_digest, tags)))
        missing = [tag for tag in tags if found[tag] != images[tag][2]]
        if missing:
            pusher.ensure_blob(layer_bytes)

            def push(tag):
                config, manifest, digest = images[tag]
                pusher.ensure_blob(config)
                pusher.put_manifest(tag, manifest, digest)
                return pusher.tag_digest(tag)

            for tag, digest in zip(missing, pool.map(push, missing)):
                found[tag] = digest
    wrong = [tag for tag in tags if found[tag] != images[tag][2]]
    if wrong:
        raise RuntimeError(
            "%d tags do not have their expected digest after the push (first: %s answers %s, "
            "expected %s)" % (len(wrong), wrong[0], found[wrong[0]], images[wrong[0]][2])
        )
    if len(set(found.values())) != count:
        raise RuntimeError("the %d tags do not have %d distinct digests" % (count, count))
    return {
        "expected": {tag: images[tag][2] for tag in tags},
        "registry": found,
        "pushed": len(missing),
        "present": count - len(missing),
        "requests": pusher.requests,
        "seconds": time.perf_counter() - started,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("registry", help="host:port of a plain-HTTP registry, e.g. 127.0.0.1:5000")
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    result = ensure_tags(args.registry, args.count, args.repository)
    print(
        "%s/%s: %d tags, %d pushed, %d already present, %d requests, %.2f s"
        % (
            args.registry,
            args.repository,
            args.count,
            result["pushed"],
            result["present"],
            result["requests"],
            result["seconds"],
        )
    )


if __name__ == "__main__":
    main()
