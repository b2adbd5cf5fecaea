"""The code of lab/docker-credential-stella-lab, a Docker credential helper for the lab's tests.

Standard library only. Implements the credential-helper protocol (``get``, ``store``, ``erase``, ``list``,
``version``) on a JSON file named by ``STELLA_LAB_CREDSTORE`` (default ``$HOME/.stella-lab-credstore.json``):
``{"<server URL>": {"Username": "...", "Secret": "..."}, ...}``. A Docker config with
``"credHelpers": {"127.0.0.1:5002": "stella-lab"}`` and the helper's directory on PATH makes Docker clients
ask it. ``get`` matches the server URL exactly, then without scheme and trailing slash; a miss prints
``credentials not found in native keychain`` and exits 1. Each ``get`` appends the server URL it was asked
for (never a secret) as one line to ``$STELLA_LAB_CREDSTORE.log``.
"""

import fcntl
import json
import os
import sys
import tempfile

NOT_FOUND = "credentials not found in native keychain"


def store_path():
    return os.environ.get("STELLA_LAB_CREDSTORE") or os.path.join(os.path.expanduser("~"), ".stella-lab-credstore.json")


def normalize(url):
    url = url.strip()
    for scheme in ("https://", "http://"):
        if url.startswith(scheme):
            url = url[len(scheme):]
    return url.rstrip("/")


def load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return {}
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        raise ValueError("%s: not a JSON object" % path)
    return data


def save(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".credstore-", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def find(data, url):
    if url in data:
        return url
    wanted = normalize(url)
    for key in data:
        if normalize(key) == wanted:
            return key
    return None


def locked(path):
    """An exclusive lock on PATH.lock for read-modify-write commands."""
    handle = open(path + ".lock", "a", encoding="utf-8")  # pylint: disable=consider-using-with
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: docker-credential-stella-lab get|store|erase|list|version\n")
        return 2
    cmd, path = argv[0], store_path()
    if cmd == "version":
        print("docker-credential-stella-lab 1.0")
        return 0
    if cmd == "get":
        url = sys.stdin.read().strip()
        with open(path + ".log", "a", encoding="utf-8") as log:
            log.write(url.replace("\n", " ") + "\n")
        data = load(path)
        key = find(data, url) if url else None
        if key is None:
            print(NOT_FOUND)
            return 1
        entry = data[key]
        print(json.dumps({"ServerURL": url, "Username": entry.get("Username", ""), "Secret": entry.get("Secret", "")}))
        return 0
    if cmd == "list":
        print(json.dumps({key: entry.get("Username", "") for key, entry in load(path).items()}))
        return 0
    if cmd == "store":
        creds = json.loads(sys.stdin.read())
        if not isinstance(creds, dict) or not creds.get("ServerURL"):
            sys.stderr.write("store: expected {\"ServerURL\", \"Username\", \"Secret\"} on stdin\n")
            return 1
        with locked(path):
            data = load(path)
            data[find(data, creds["ServerURL"]) or creds["ServerURL"]] = {
                "Username": creds.get("Username", ""), "Secret": creds.get("Secret", "")}
            save(path, data)
        return 0
    if cmd == "erase":
        url = sys.stdin.read().strip()
        with locked(path):
            data = load(path)
            key = find(data, url)
            if key is None:
                print(NOT_FOUND)
                return 1
            del data[key]
            save(path, data)
        return 0
    sys.stderr.write("unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
