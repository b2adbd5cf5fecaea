"""Small helpers for lab/lab.sh (standard library only): HTTP probes, JSON merges, atomic writes.

Not part of the collection. Every address it talks to is given by lab.sh (loopback or the lab's own
docker0 gateway / containers).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    # Never route lab traffic through a proxy from the environment.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _once(url: str, method: str, authorization: str | None, accept: str | None):
    req = urllib.request.Request(url, method=method)
    if accept:
        req.add_header("Accept", accept)
    if authorization:
        req.add_header("Authorization", authorization)
    try:
        with _no_proxy_opener().open(req, timeout=5) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers or {})


def _bearer(challenge: str, basic: str, scope: str | None) -> str | None:
    """Fetch a token for a ``Bearer realm=...,service=...`` challenge with Basic credentials."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    query = {k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v}
    url = params.get("realm", "") + ("?" + urllib.parse.urlencode(query) if query else "")
    req = urllib.request.Request(url, headers={"Authorization": basic})
    try:
        with _no_proxy_opener().open(req, timeout=5) as resp:
            data = json.load(resp)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return data.get("token") or data.get("access_token")


def _request(url: str, method: str = "GET", auth: tuple[str, str] | None = None, accept: str | None = None,
             scope: str | None = None):
    basic = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else None
    status, headers = _once(url, method, basic, accept)
    challenge = {k.lower(): v for k, v in headers.items()}.get("www-authenticate", "")
    if status == 401 and basic and challenge.lower().startswith("bearer "):
        token = _bearer(challenge[len("bearer "):], basic, scope)
        if token:
            status, headers = _once(url, method, "Bearer " + token, accept)
    return status, headers


def _auth_from(argv: list[str]) -> tuple[str, str] | None:
    if argv:
        with open(argv[0], encoding="utf-8") as fh:
            data = json.load(fh)
        return data["username"], data["password"]
    return None


def cmd_status(argv: list[str]) -> int:
    """status URL [SECRETS_JSON]: print the HTTP status (000 when unreachable)."""
    try:
        status, dummy = _request(argv[0], auth=_auth_from(argv[1:]))
    except (OSError, ValueError):
        print("000")
        return 0
    print(status)
    return 0


def cmd_digest(argv: list[str]) -> int:
    """digest REGISTRY REPO TAG [SECRETS_JSON]: print the tag's manifest digest, nothing if absent."""
    registry, repo, tag = argv[:3]
    try:
        status, headers = _request(
            f"http://{registry}/v2/{repo}/manifests/{tag}",
            method="HEAD",
            auth=_auth_from(argv[3:]),
            accept=MANIFEST_ACCEPT,
            scope=f"repository:{repo}:pull",
        )
    except OSError:
        return 0
    if status == 200:
        digest = {k.lower(): v for k, v in headers.items()}.get("docker-content-digest", "")
        if digest.startswith("sha256:"):
            print(digest)
    return 0


def atomic_write_text(path: str, text: str, mode: int = 0o644) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# The lab engine's pools for user-defined networks: 256 networks of /24 (Engine 20.10's built-in pools hold
# about 30), so a hundred thin targets can each hold a Compose project's network (docs/lab.md). Outside
# 172.17.0.0/16 (the default bridge) and the DinD targets' own 10.231/10.232 ranges.
ADDRESS_POOLS = [{"base": "10.224.0.0/16", "size": 24}]


def cmd_daemon_json(argv: list[str]) -> int:
    """daemon-json PATH BIP REGISTRY: merge bip, the lab's address pools (unless the file names pools of its
    own) and an insecure registry into dockerd's config."""
    path, bip, registry = argv
    data = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            text = fh.read().strip()
        data = json.loads(text) if text else {}
    new = dict(data)
    new["bip"] = bip
    new.setdefault("default-address-pools", ADDRESS_POOLS)
    regs = list(new.get("insecure-registries", []))
    if registry not in regs:
        regs.append(registry)
    new["insecure-registries"] = regs
    if new != data:
        atomic_write_text(path, json.dumps(new, indent=2, sort_keys=True) + "\n")
        print("changed")
    return 0


def cmd_write_json(argv: list[str]) -> int:
    """write-json PATH MODE: read JSON from stdin, validate, write it atomically (pretty)."""
    path, mode = argv[0], int(argv[1], 8)
    data = json.load(sys.stdin)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode)
    return 0


def cmd_get(argv: list[str]) -> int:
    """get PATH KEY.KEY...: print one value of a JSON file (strings raw, others as JSON)."""
    with open(argv[0], encoding="utf-8") as fh:
        value = json.load(fh)
    for key in argv[1].split("."):
        value = value[key]
    print(value if isinstance(value, str) else json.dumps(value))
    return 0


COMMANDS = {
    "status": cmd_status,
    "digest": cmd_digest,
    "daemon-json": cmd_daemon_json,
    "write-json": cmd_write_json,
    "get": cmd_get,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.stderr.write(f"usage: labtool.py {{{','.join(COMMANDS)}}} ...\n")
        sys.exit(2)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
