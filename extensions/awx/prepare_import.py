# Fills in the `awx import` template of stellaops.runtime (stellaops-runtime.awx.template.json next to this
# file) and writes the document `awx import` reads, so that AWX never sees a placeholder:
#
#   export STELLA_STORE_PASSWORD=...            # the job store's PostgreSQL password (required)
#   python3 extensions/awx/prepare_import.py \
#       --scm-url https://git.acme.internal/ops/stella-deployments.git \
#       --ee-image registry.acme.internal/stella/stellaops-runtime-ee:0.3.0 \
#       --store-dsn 'postgresql://stella@db.acme.internal:5432/stella?sslmode=verify-full' \
#       --store-ca-file db-ca.pem --ssh-user deploy --ssh-key-file ~/.ssh/stella_deploy \
#       --host vm-01=10.0.0.11 --host vm-02=10.0.0.12 | awx import
#
# Secrets come only from the environment (STELLA_STORE_PASSWORD, STELLA_REGISTRY_PASSWORD,
# STELLA_TRAFFIC_TOKEN, STELLA_SCM_PASSWORD, STELLA_EE_REGISTRY_PASSWORD, STELLA_SSH_KEY_PASSPHRASE,
# STELLA_SIGNING_PASSPHRASE) or from files (--ssh-key-file, --scm-ssh-key-file, --store-ca-file,
# --signing-key-file), never from the command line. The registry, traffic controller, project source, EE
# registry and evidence signing key credentials are optional: one that is given no value
# is left out of the document, with every reference to it. The document goes to stdout, or with --output to a file of mode 0600. See
# docs/awx.md. Python 3.8 or later, standard library only.
"""Fill in the stellaops.runtime ``awx import`` template (docs/awx.md)."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from urllib.parse import parse_qs, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "stellaops-runtime.awx.template.json")

MARK = "@@"
PLACEHOLDER = re.compile(r"^@@([A-Z0-9_]+)@@$")

# Each placeholder of the template: where its value comes from ("option" NAME: --name; "env" VAR; "file"
# NAME: the text of the file --name names; "derived": computed from the others) and whether the document
# needs it.
SOURCES = {
    "SCM_URL": ("option", "scm_url", True),
    "SCM_BRANCH": ("option", "scm_branch", True),
    "SCM_USERNAME": ("option", "scm_username", False),
    "SCM_PASSWORD": ("env", "STELLA_SCM_PASSWORD", False),
    "SCM_SSH_KEY": ("file", "scm_ssh_key_file", False),
    "EE_IMAGE": ("option", "ee_image", True),
    "EE_REGISTRY_HOST": ("derived", "ee_image", False),
    "EE_REGISTRY_USERNAME": ("option", "ee_registry_username", False),
    "EE_REGISTRY_PASSWORD": ("env", "STELLA_EE_REGISTRY_PASSWORD", False),
    "STORE_DSN": ("option", "store_dsn", True),
    "STORE_PASSWORD": ("env", "STELLA_STORE_PASSWORD", True),
    "STORE_CA_CERTIFICATE": ("file", "store_ca_file", False),
    "SSH_USERNAME": ("option", "ssh_user", True),
    "SSH_PRIVATE_KEY": ("file", "ssh_key_file", True),
    "SSH_KEY_PASSPHRASE": ("env", "STELLA_SSH_KEY_PASSPHRASE", False),
    "REGISTRY_HOST": ("option", "registry_host", False),
    "REGISTRY_USERNAME": ("option", "registry_username", False),
    "REGISTRY_PASSWORD": ("env", "STELLA_REGISTRY_PASSWORD", False),
    "TRAFFIC_URL": ("option", "traffic_url", False),
    "TRAFFIC_ROLLBACK_URL": ("option", "traffic_rollback_url", False),
    "TRAFFIC_TOKEN": ("env", "STELLA_TRAFFIC_TOKEN", False),
    "SIGNING_KEY": ("file", "signing_key_file", False),
    "SIGNING_KEY_PASSPHRASE": ("env", "STELLA_SIGNING_PASSPHRASE", False),
}

# Credentials the document keeps only when one of their placeholders has a value.
OPTIONAL_CREDENTIALS = (
    "Stella registry",
    "Stella traffic controller",
    "Stella project source",
    "Stella EE registry",
    "Stella evidence signing key",
)

TARGET_GROUP = "stella_targets"

# Names reserved for documentation (RFC 2606 / RFC 6761): a value that uses one is a placeholder.
EXAMPLE_HOST = re.compile(r"(^|\.)(example\.(com|net|org)|example|invalid)$", re.IGNORECASE)


class PrepareError(Exception):
    """A value is missing or unusable; the message says which and why."""


def _host_of(value):
    """The host name of a URL, an ``scp``-like git address (``git@host:path``) or an image reference."""
    if "://" in value:
        return urlsplit(value).hostname or ""
    if re.match(r"^[^/@\s]+@[^:/\s]+:", value):
        return value.split("@", 1)[1].split(":", 1)[0]
    first = value.split("/", 1)[0]
    return first.split(":", 1)[0] if ("." in first or ":" in first) and "/" in value else ""


def _not_an_example(option, value):
    host = _host_of(value)
    if host and EXAMPLE_HOST.search(host):
        raise PrepareError("%s names %s, a host reserved for examples: give the real one" % (option, host))


def check_scm_url(value):
    if not re.match(r"^(https?|ssh|git)://[^/\s]+/\S+$", value) and not re.match(r"^[^/@\s]+@[^:/\s]+:\S+$", value):
        raise PrepareError("--scm-url %r is not a git URL (https://, ssh://, git:// or user@host:path)" % value)
    _not_an_example("--scm-url", value)


def check_image(value):
    if not re.match(r"^[a-z0-9][a-z0-9._/:@-]*$", value, re.IGNORECASE):
        raise PrepareError("--ee-image %r is not an image reference" % value)
    _not_an_example("--ee-image", value)


def check_store_dsn(value, ca_file):
    parts = urlsplit(value)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or len(parts.path) < 2:
        raise PrepareError("--store-dsn must be postgresql://USER@HOST[:PORT]/DATABASE[?sslmode=verify-full]")
    query = parse_qs(parts.query)
    if parts.password is not None or "password" in query:
        raise PrepareError("--store-dsn carries a password: leave it out, STELLA_STORE_PASSWORD gives it (PGPASSWORD)")
    if ca_file and "sslrootcert" in query:
        raise PrepareError("--store-dsn names sslrootcert, which wins over --store-ca-file: leave it out of the DSN")
    _not_an_example("--store-dsn", value)


def check_url(option, value):
    if not re.match(r"^https?://[^/\s]+\S*$", value):
        raise PrepareError("%s %r is not an http(s) URL" % (option, value))
    _not_an_example(option, value)


def check_private_key(option, text):
    if "PRIVATE KEY-----" not in text:
        raise PrepareError("%s is not a PEM or OpenSSH private key" % option)


def parse_host(value):
    """``NAME`` or ``NAME=ADDRESS`` of ``--host``: the inventory host and its ``ansible_host``."""
    name, _sep, address = value.partition("=")
    if not re.match(r"^[A-Za-z0-9_.:-]+$", name) or (address and not re.match(r"^[A-Za-z0-9_.:%-]+$", address)):
        raise PrepareError("--host %r must be NAME or NAME=ADDRESS (no spaces)" % value)
    return name, address


def gather(options, environ):
    """The value of every placeholder (None: not given), checked."""
    values = {}
    for name, (kind, key, _required) in SOURCES.items():
        if kind == "derived":
            values[name] = None
            continue
        if kind == "option":
            value = getattr(options, key)
        elif kind == "env":
            value = environ.get(key) or None
        else:
            path = getattr(options, key)
            value = None
            if path:
                try:
                    with open(os.path.expanduser(path), encoding="utf-8") as handle:
                        value = handle.read()
                except OSError as exc:
                    raise PrepareError("--%s %s: %s" % (key.replace("_", "-"), path, exc.strerror or exc)) from exc
                if not value.endswith("\n"):
                    value += "\n"
        values[name] = value if value not in ("", None) else None
    missing = sorted("--%s" % key.replace("_", "-") if kind != "env" else key
                     for name, (kind, key, required) in SOURCES.items() if required and values[name] is None)
    if missing:
        raise PrepareError("missing: %s" % ", ".join(missing))
    check_scm_url(values["SCM_URL"])
    check_image(values["EE_IMAGE"])
    check_store_dsn(values["STORE_DSN"], values["STORE_CA_CERTIFICATE"])
    check_private_key("--ssh-key-file", values["SSH_PRIVATE_KEY"])
    if values["SCM_SSH_KEY"]:
        check_private_key("--scm-ssh-key-file", values["SCM_SSH_KEY"])
    if values["SIGNING_KEY"]:
        check_private_key("--signing-key-file", values["SIGNING_KEY"])
    elif values["SIGNING_KEY_PASSPHRASE"]:
        values["SIGNING_KEY_PASSPHRASE"] = None  # a passphrase without a key: no signing key credential
    for name, option in (("TRAFFIC_URL", "--traffic-url"), ("TRAFFIC_ROLLBACK_URL", "--traffic-rollback-url")):
        if values[name]:
            check_url(option, values[name])
    if values["REGISTRY_HOST"]:
        _not_an_example("--registry-host", values["REGISTRY_HOST"] + "/")
    # the registry of the EE image, for the credential AWX pulls it with
    values["EE_REGISTRY_HOST"] = (_host_of(values["EE_IMAGE"]) or "docker.io") if values["EE_REGISTRY_USERNAME"] else None
    if values["EE_REGISTRY_USERNAME"] and not values["EE_REGISTRY_PASSWORD"]:
        raise PrepareError("--ee-registry-username needs STELLA_EE_REGISTRY_PASSWORD")
    return values


def _placeholders(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _placeholders(value)
    elif isinstance(node, list):
        for value in node:
            yield from _placeholders(value)
    elif isinstance(node, str):
        match = PLACEHOLDER.match(node)
        if match:
            yield match.group(1)


def _without(node, dropped):
    """``node`` without the references ``dropped`` (natural keys): list items and fields equal to one go."""
    if isinstance(node, dict):
        return {key: _without(value, dropped) for key, value in node.items() if value not in dropped}
    if isinstance(node, list):
        return [_without(value, dropped) for value in node if value not in dropped]
    return node


def _fill(node, values):
    if isinstance(node, dict):
        return {key: _fill(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill(value, values) for value in node]
    if isinstance(node, str):
        match = PLACEHOLDER.match(node)
        if match:
            if match.group(1) not in values:
                raise PrepareError("the template names a placeholder this command does not know: %s" % node)
            return values[match.group(1)] or ""
    return node


def _set_hosts(document, hosts):
    (inventory,) = document["inventory"]
    related = inventory["related"]
    prototype = related["hosts"][0]
    group = next(g for g in related["groups"] if g["name"] == TARGET_GROUP)
    related["hosts"], group["related"]["hosts"] = [], []
    for name, address in hosts:
        host = copy.deepcopy(prototype)
        host["name"] = host["natural_key"]["name"] = name
        host["variables"] = "---\nansible_host: %s\n" % address if address else ""
        related["hosts"].append(host)
        group["related"]["hosts"].append(host["natural_key"])


def prepare(template, values, hosts):
    """The document ``awx import`` reads: ``template`` with ``values`` filled in, the optional credentials
    nobody gave a value left out with every reference to them, and ``hosts`` (``[(name, address)]``) as
    the inventory's hosts, all in the ``stella_targets`` group."""
    document = copy.deepcopy(template)
    dropped = []
    for credential in document["credentials"]:
        given = [name for name in _placeholders(credential["inputs"]) if values.get(name)]
        if credential["name"] in OPTIONAL_CREDENTIALS and not given:
            dropped.append(credential["natural_key"])
    document["credentials"] = [c for c in document["credentials"] if c["natural_key"] not in dropped]
    document = _without(document, dropped)
    _set_hosts(document, hosts)
    document = _fill(document, values)
    for credential in document["credentials"]:
        credential["inputs"] = {key: value for key, value in credential["inputs"].items() if value != ""}
    check_document(document)
    return document


def _strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def check_document(document):
    """No placeholder is left, and every credential of a type the document defines gives that type's
    required inputs (AWX refuses to start a job with a credential that does not)."""
    left = sorted({s for s in _strings(document) if MARK in s})
    if left:
        raise PrepareError("placeholders left in the document: %s" % ", ".join(left))
    types = {(t["name"], t["kind"]): t for t in document["credential_types"]}
    for credential in document["credentials"]:
        kind = types.get((credential["credential_type"]["name"], credential["credential_type"]["kind"]))
        missing = [f for f in (kind or {}).get("inputs", {}).get("required", []) if not credential["inputs"].get(f)]
        if missing:
            raise PrepareError("credential %r lacks %s" % (credential["name"], ", ".join(missing)))


def parser():
    p = argparse.ArgumentParser(
        prog="prepare_import.py", description="Write the stellaops.runtime `awx import` document (docs/awx.md).",
        epilog="Secrets from the environment: STELLA_STORE_PASSWORD (required), STELLA_REGISTRY_PASSWORD, "
               "STELLA_TRAFFIC_TOKEN, STELLA_SCM_PASSWORD, STELLA_EE_REGISTRY_PASSWORD, STELLA_SSH_KEY_PASSPHRASE, "
               "STELLA_SIGNING_PASSPHRASE.")
    p.add_argument("--scm-url", help="git URL of the repository holding extensions/awx/project")
    p.add_argument("--scm-branch", default="main", help="branch, tag or commit of the project (default: main)")
    p.add_argument("--scm-username", help="user for a private repository over https (password: STELLA_SCM_PASSWORD)")
    p.add_argument("--scm-ssh-key-file", help="private key for a private repository over ssh")
    p.add_argument("--ee-image", help="the execution environment image that carries stellaops.runtime")
    p.add_argument("--ee-registry-username", help="user AWX pulls that image as (password: STELLA_EE_REGISTRY_PASSWORD)")
    p.add_argument("--store-dsn", help="postgresql://USER@HOST:PORT/DATABASE?sslmode=verify-full, no password")
    p.add_argument("--store-ca-file", help="PEM file of the CA that signed the store server's certificate")
    p.add_argument("--ssh-user", help="the user the jobs log in as on the targets (docs/awx.md#the-target-user)")
    p.add_argument("--ssh-key-file", help="that user's private key (passphrase: STELLA_SSH_KEY_PASSPHRASE)")
    p.add_argument("--registry-host", help="registry (host[:port]) whose credentials planning uses")
    p.add_argument("--registry-username", help="user on that registry (password: STELLA_REGISTRY_PASSWORD)")
    p.add_argument("--traffic-url", help="shift URL of the router controller (token: STELLA_TRAFFIC_TOKEN)")
    p.add_argument("--traffic-rollback-url", help="rollback URL of the router controller (default: the shift URL)")
    p.add_argument("--signing-key-file", help="the evidence signing key (passphrase: STELLA_SIGNING_PASSPHRASE), "
                   "docs/trust.md")
    p.add_argument("--host", action="append", default=[], metavar="NAME[=ADDRESS]",
                   help="a target in the stella_targets group (repeat; none: add them in AWX later)")
    p.add_argument("--template", default=TEMPLATE, help=argparse.SUPPRESS)
    p.add_argument("--output", help="write the document to this file (mode 0600) instead of stdout")
    return p


def main(argv=None, environ=None, stdout=None, stderr=None):
    environ = os.environ if environ is None else environ
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options = parser().parse_args(argv)
    try:
        values = gather(options, environ)
        hosts = [parse_host(value) for value in options.host]
        with open(options.template, encoding="utf-8") as handle:
            document = prepare(json.load(handle), values, hosts)
    except PrepareError as exc:
        stderr.write("prepare_import: %s\n" % exc)
        return 2
    text = json.dumps(document, indent=2) + "\n"
    if options.output:
        fd = os.open(options.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        stdout.write(text)
    kept = ", ".join(c["name"] for c in document["credentials"])
    stderr.write("prepare_import: credentials %s; %d host(s) in %s\n" % (kept, len(hosts), TARGET_GROUP))
    return 0


if __name__ == "__main__":
    sys.exit(main())
