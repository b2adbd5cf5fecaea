# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The relay's TCP forwarder process (``stella_relay`` writes this file out and starts it detached).

It receives listening sockets already bound (and pinned to their interface) by ``stella_relay`` as
inherited file descriptors, so a bind failure is the module's error, never a silent half-start:

    python3 forwarder.py --name NAME --forward FD=HOST:PORT [--forward FD=HOST:PORT ...]

Each accepted connection is joined to a new connection to ``HOST:PORT``; bytes are copied both ways
and each direction's end is passed on (half-close). SIGTERM ends the process. Standard library only:
this file runs on its own, outside Ansible.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time

CONNECT_TIMEOUT = 10.0
PIECE = 1 << 16


def log(name, message):
    sys.stdout.write("%s stella-relay[%s] %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), name, message))
    sys.stdout.flush()


def parse_forward(value):
    """``FD=HOST:PORT`` as ``(fd, host, port)``."""
    fd, sep, upstream = value.partition("=")
    host, colon, port = upstream.rpartition(":")
    if not sep or not colon or not host or not fd.isdigit() or not port.isdigit():
        raise ValueError("--forward %r is not FD=HOST:PORT" % value)
    return int(fd), host.strip("[]"), int(port)


def parse_args(argv):
    name, forwards = "relay", []
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag == "--name" and args:
            name = args.pop(0)
        elif flag == "--forward" and args:
            forwards.append(parse_forward(args.pop(0)))
        else:
            raise ValueError("unexpected argument %r" % flag)
    if not forwards:
        raise ValueError("at least one --forward FD=HOST:PORT is required")
    return name, forwards


def _copy(source, sink):
    try:
        while True:
            data = source.recv(PIECE)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _join(name, client, peer, host, port):
    try:
        upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        log(name, "upstream %s:%d unreachable for %s:%d: %s" % (host, port, peer[0], peer[1], exc))
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
    back.start()
    _copy(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(name, listener, host, port):
    while True:
        try:
            client, peer = listener.accept()
        except OSError as exc:
            log(name, "accept failed: %s" % exc)
            time.sleep(0.1)
            continue
        threading.Thread(target=_join, args=(name, client, peer, host, port), daemon=True).start()


def main(argv=None):
    try:
        name, forwards = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write("forwarder: %s\n" % exc)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    for fd, host, port in forwards:
        listener = socket.socket(fileno=fd)
        bound = listener.getsockname()
        log(name, "forwarding %s:%d to %s:%d" % (bound[0], bound[1], host, port))
        threading.Thread(target=serve, args=(name, listener, host, port), daemon=True).start()
    while not stop.wait(3600):
        pass
    log(name, "stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
