# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side relay endpoint (``stella_relay``): a user-space TCP forwarder that makes a deployed
service reachable from the Compose relay container, and from nothing else.

``state: present`` binds one listening socket per forward on ``listen_address`` only (never a
wildcard), pins each to the interface that owns that address with ``SO_BINDTODEVICE`` (so traffic
arriving on any other interface is refused), then starts the forwarder (``forwarder.py``, relay/forwarder.py's source
written next to its state) detached: a new session, standard streams to ``relay.log``, the sockets
inherited, the pid in ``relay.pid``. A relay already running with the same configuration is left
alone (``changed: false``) and keeps its ports, so the published endpoints stay the same.
``state: absent`` stops it and removes its directory. Standard library only.

``listen_address: host-gateway`` is the fallback when Compose announces no relay-link gateway: the
default bridge's gateway (where ``host.docker.internal`` points on a Linux engine), not pinned,
since the relay reaches it from its own bridge.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import inspect
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.host import procfs as _procfs
from ansible_collections.stellaops.runtime.plugins.module_utils.relay import forwarder as _relay_forwarder
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import canonical_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import invalid
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, project_lock
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager

STATES = ("present", "absent")
HOST_GATEWAY = "host-gateway"
GROUPS = (
    ("relay", ("resolve_address", "inspect_relay", "stop_relay", "bind_endpoints", "start_relay", "remove_relay")),
)
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")
CONFIG_FILE, PID_FILE, LOG_FILE, FORWARDER_FILE = "relay.json", "relay.pid", "relay.log", "forwarder.py"
RELAY_SCHEMA = "stella.relay.v1"
SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)
SIOCGIFADDR = 0x8915
STOP_WAIT = 5.0


def _port(value, key, allow_zero=False):
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise invalid("%s must be a TCP port number" % key) from None
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise invalid("%s must be a TCP port number (got %d)" % (key, port))
    return port


def parse_request(options):
    """The validated request, before anything is touched (pure)."""
    state = options.get("state") or "present"
    if state not in STATES:
        raise invalid("state must be one of %s" % ", ".join(STATES))
    name = options.get("name") or ""
    if not NAME_RE.match(name):
        raise invalid("name must be 1 to 128 letters, digits, '.', '_' or '-' (got %r)" % name)
    base = options.get("state_directory")
    if not base or not os.path.isabs(base):
        raise invalid("state_directory must be an absolute path")
    request = {"name": name, "state": state, "directory": os.path.join(base, name), "target": None}
    if state == "absent":
        return request
    address = str(options.get("listen_address") or "")
    if address != HOST_GATEWAY:
        try:
            parsed = ipaddress.IPv4Address(address)
        except ValueError:
            raise invalid("listen_address must be an IPv4 address or %r (got %r)" % (HOST_GATEWAY, address)) from None
        if parsed.is_unspecified:
            raise StellaError(
                "relay_bind_refused",
                "listen_address %s would expose the endpoint on every interface; "
                "the relay binds one announced address only" % address,
                phase="validate_payload",
            )
    device = options.get("device") or "auto"
    forwards, seen = [], set()
    for index, entry in enumerate(options.get("forwards") or []):
        where = "forwards[%d]" % index
        if not isinstance(entry, dict):
            raise invalid("%s must be a mapping" % where)
        port = _port(entry.get("port"), where + ".port")
        if port in seen:
            raise invalid("%s.port %d is forwarded twice" % (where, port))
        seen.add(port)
        host = str(entry.get("upstream_host") or "127.0.0.1")
        forwards.append(
            {
                "port": port,
                "upstream_host": host,
                "upstream_port": _port(entry.get("upstream_port"), where + ".upstream_port"),
                "listen_port": _port(entry.get("listen_port") or 0, where + ".listen_port", allow_zero=True),
            }
        )
    if not forwards:
        raise invalid("forwards must list at least one port to relay")
    request.update(listen_address=address, device=device, forwards=sorted(forwards, key=lambda f: f["port"]))
    return request


def interface_of(address, addresses):
    """The interface whose IPv4 address is ``address``, from ``{interface: address}`` (pure)."""
    owners = sorted(name for name, value in addresses.items() if value == address)
    if not owners:
        raise StellaError(
            "relay_address_invalid", "no interface of this host has the address %s" % address, phase="resolve_address"
        )
    return owners[0]


def local_addresses():
    """``{interface: primary IPv4 address}`` of this host (``SIOCGIFADDR`` per interface)."""
    out = {}
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
            out[name] = socket.inet_ntoa(raw[20:24])
    finally:
        probe.close()
    return out


def forwarder_source():
    return inspect.getsource(_relay_forwarder).encode("utf-8")


def desired_config(request, address, device, source_digest):
    """What a running relay must match to be left alone (pure)."""
    return {
        "schema": RELAY_SCHEMA,
        "name": request["name"],
        "listenAddress": address,
        "device": device,
        "forwarderSha256": source_digest,
        "forwards": [
            {"port": f["port"], "upstreamHost": f["upstream_host"], "upstreamPort": f["upstream_port"]}
            for f in request["forwards"]
        ],
    }


def matches(current, desired, request):
    """Whether the recorded relay ``current`` serves ``desired`` (ports asked for included) (pure)."""
    if not current:
        return False
    if {k: v for k, v in current.items() if k not in ("listenPorts", "pid")} != desired:
        return False
    ports = current.get("listenPorts") or {}
    return all(f["listen_port"] in (0, ports.get(str(f["port"]))) for f in request["forwards"])


def endpoints(config):
    """``<port>=<address>:<listen port>`` per forward: the ``publish-endpoint`` messages (pure)."""
    ports = config.get("listenPorts") or {}
    return [
        "%d=%s:%s" % (f["port"], config["listenAddress"], ports[str(f["port"])])
        for f in config["forwards"]
        if str(f["port"]) in ports
    ]


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _alive(pid, forwarder):
    """Whether ``pid`` is a live forwarder started from ``forwarder``."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            argv = handle.read().split(b"\0")
    except (OSError, TypeError):
        return False
    return forwarder.encode() in argv


def _running(pid):
    """Whether ``pid`` still runs: a zombie has exited, but not one whose other threads still hold its
    sockets (host/procfs.py :func:`any_thread_alive`)."""
    return _procfs.any_thread_alive(pid)


class Relay(Manager):
    groups = GROUPS

    def initial_evidence(self, request):
        return {
            "name": request["name"],
            "state": request["state"],
            "relayDirectory": request["directory"],
            "pid": None,
            "endpoints": [],
            "listenAddress": None,
            "device": None,
            "listenPorts": {},
            "pidFile": os.path.join(request["directory"], PID_FILE),
            "logFile": os.path.join(request["directory"], LOG_FILE),
        }

    def _current(self, directory):
        config = _read_json(os.path.join(directory, CONFIG_FILE))
        try:
            with open(os.path.join(directory, PID_FILE), encoding="utf-8") as handle:
                pid = int(handle.read().strip())
        except (OSError, ValueError):
            pid = None
        running = pid if pid and _alive(pid, os.path.join(directory, FORWARDER_FILE)) else None
        return config, running

    def _host_gateway(self):
        _rc, out, _err = self.cli.run(
            ["network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"], phase="resolve_address"
        )
        try:
            for entry in json.loads(out) or []:
                gateway = entry.get("Gateway") or ""
                if gateway and ipaddress.ip_address(gateway).version == 4:
                    return gateway
        except ValueError:
            pass
        raise StellaError(
            "relay_address_invalid", "the default bridge network has no IPv4 gateway to bind", phase="resolve_address"
        )

    @staticmethod
    def _stop(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_WAIT
        while time.monotonic() < deadline:
            if not _running(pid):
                return
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @staticmethod
    def _bind(address, port, device):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if device:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, device.encode() + b"\0")
                except OSError as exc:
                    raise StellaError(
                        "relay_pin_refused",
                        "cannot pin the relay socket to %s (SO_BINDTODEVICE): %s" % (device, exc.strerror),
                        phase="bind_endpoints",
                    ) from None
            try:
                sock.bind((address, port))
            except OSError as exc:
                code = "relay_port_in_use" if exc.errno == errno.EADDRINUSE else "relay_address_invalid"
                raise StellaError(
                    code, "cannot bind %s:%d: %s" % (address, port, exc.strerror), phase="bind_endpoints"
                ) from None
            sock.listen(128)
            return sock
        except BaseException:
            sock.close()
            raise

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        directory = request["directory"]
        if request["state"] == "absent":
            with rec.phase("inspect_relay"):
                _config, pid = self._current(directory)
                exists = os.path.isdir(directory)
            result["changed"] = bool(pid or exists)
            if check_mode or not result["changed"]:
                return
            with rec.phase("remove_relay"):
                with project_lock(directory):
                    if pid:
                        self._stop(pid)
                    shutil.rmtree(directory)
            return
        with rec.phase("resolve_address"):
            if request["listen_address"] == HOST_GATEWAY:
                address = self._host_gateway()
                device = None if request["device"] in ("auto", "none") else request["device"]
            else:
                address = request["listen_address"]
                addresses = local_addresses()
                owner = interface_of(address, addresses)
                device = {"auto": owner, "none": None}.get(request["device"], request["device"])
        source = forwarder_source()
        desired = desired_config(request, address, device, hashlib.sha256(source).hexdigest())
        evidence.update(listenAddress=address, device=device)
        os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
        with project_lock(directory):
            with rec.phase("inspect_relay"):
                current, pid = self._current(directory)
            if pid and matches(current, desired, request):
                evidence.update(pid=pid, listenPorts=current["listenPorts"], endpoints=endpoints(current))
                return
            result["changed"] = True
            if check_mode:
                evidence["checkMode"] = True
                return
            previous = (current or {}).get("listenPorts") or {}
            if pid:
                with rec.phase("stop_relay"):
                    self._stop(pid)
            with rec.phase("bind_endpoints"):
                sockets = []
                try:
                    for forward in request["forwards"]:
                        port = forward["listen_port"] or int(previous.get(str(forward["port"])) or 0)
                        try:
                            sockets.append(self._bind(address, port, device))
                        except StellaError as exc:
                            if forward["listen_port"] or not port or exc.code != "relay_port_in_use":
                                raise
                            self.warn("relay port %d was taken since the last start; a new one is used" % port)
                            sockets.append(self._bind(address, 0, device))
                except BaseException:
                    for sock in sockets:
                        sock.close()
                    raise
            try:
                with rec.phase("start_relay"):
                    config = dict(
                        desired,
                        listenPorts={str(f["port"]): s.getsockname()[1] for f, s in zip(request["forwards"], sockets)},
                    )
                    pid = self._spawn(directory, request, source, sockets)
                    try:
                        atomic_write(os.path.join(directory, CONFIG_FILE), canonical_json(config), mode=0o600)
                        atomic_write(os.path.join(directory, PID_FILE), b"%d\n" % pid, mode=0o644)
                    except BaseException:
                        self._stop(pid)  # no forwarder without its pid file
                        raise
            finally:
                for sock in sockets:
                    sock.close()
            evidence.update(pid=pid, listenPorts=config["listenPorts"], endpoints=endpoints(config))

    def _spawn(self, directory, request, source, sockets):
        forwarder = os.path.join(directory, FORWARDER_FILE)
        atomic_write(forwarder, source, mode=0o600)
        argv = [sys.executable, forwarder, "--name", request["name"]]
        for forward, sock in zip(request["forwards"], sockets):
            argv += ["--forward", "%d=%s:%d" % (sock.fileno(), forward["upstream_host"], forward["upstream_port"])]
        with open(os.path.join(directory, LOG_FILE), "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=[s.fileno() for s in sockets],
                start_new_session=True,
                cwd=directory,
            )
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StellaError(
                    "relay_start_failed",
                    "the relay forwarder exited at once (status %s); see %s"
                    % (proc.returncode, os.path.join(directory, LOG_FILE)),
                    phase="start_relay",
                )
            time.sleep(0.05)
        return proc.pid  # detached on purpose: never waited for here; init adopts it when the module exits
