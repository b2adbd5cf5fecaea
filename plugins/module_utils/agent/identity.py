# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Is the target identity's endpoint the host this code runs on? (``wrong_host`` otherwise)

The contract forbids reporting target-side success from any other host. Standard library only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import endpoint_host
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import parse_ip_addresses

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def endpoint_is_this_host(endpoint, addresses, hostnames, resolved=()):
    """True when ``endpoint`` names this host (pure).

    ``addresses``: the host's own addresses (``ip -j addr``); ``hostnames``: its names;
    ``resolved``: addresses the endpoint's host name resolves to (for names).
    """
    host = endpoint_host(endpoint)
    if not host:
        return False
    if host in _LOOPBACK_NAMES:
        return True
    if _is_ip(host):
        return ipaddress.ip_address(host).is_loopback or host in set(addresses)
    names = {name.lower() for name in hostnames if name}
    if host in names or host.split(".", 1)[0] in {n.split(".", 1)[0] for n in names if "." not in host}:
        return True
    own = set(addresses)
    return any((ipaddress.ip_address(a).is_loopback if _is_ip(a) else False) or a in own for a in resolved)


def _resolve(host):
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return []


def host_facts(run_command):
    """This host's addresses and names (``ip -j addr`` + ``socket``), for the identity check."""
    addresses = []
    with contextlib.suppress(OSError):
        if shutil.which("ip"):
            rc, out, _err = run_command(["ip", "-j", "addr"])
            if rc == 0:
                addresses = parse_ip_addresses(out)
    if not addresses:
        addresses = _resolve(socket.gethostname())
    names = [socket.gethostname()]
    with contextlib.suppress(OSError):
        names.append(socket.getfqdn())
    return {"addresses": addresses, "hostnames": sorted(set(names))}


def ensure_this_host(target, run_command):
    """Raise ``wrong_host`` unless the target endpoint names the host this code runs on."""
    host = endpoint_host(target["endpoint"])
    if host in _LOOPBACK_NAMES:
        return
    facts = host_facts(run_command)
    resolved = [] if _is_ip(host) else _resolve(host)
    if not endpoint_is_this_host(target["endpoint"], facts["addresses"], facts["hostnames"], resolved):
        raise StellaError(
            "wrong_host",
            "target %s endpoint %s does not name this host (%s; addresses %s)"
            % (target["id"], target["endpoint"], socket.gethostname(), ", ".join(facts["addresses"][:8])),
            phase="verify_target",
        )
