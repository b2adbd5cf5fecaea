# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One HTTP exchange bounded as a whole by a deadline (the webhook adapter's): every socket the exchange
opens is registered with its :class:`Deadline` and shut down when the deadline passes, so a read or write
blocked on it returns at once, however slowly the peer sends; :func:`deadline_http_adapter` is the
``requests`` transport adapter whose connections do so.
"""

from __future__ import annotations

import socket
import threading
import time


class Deadline:
    """One webhook exchange's deadline: every socket the exchange opens is registered here and shut down
    (both ways) when the deadline passes, so a read or write blocked on it returns at once, however
    the peer paces its bytes (``expire``, run by a timer thread)."""

    def __init__(self, seconds):
        self.at = time.monotonic() + seconds
        self.expired = False
        self._sockets = []
        self._lock = threading.Lock()

    def remaining(self):
        return max(self.at - time.monotonic(), 0.001)

    def opened(self, sock):
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self):
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, or handed over to the TLS socket that is registered too


def deadline_http_adapter(requests, deadline):
    """A ``requests`` transport adapter whose connections register their sockets with ``deadline`` and
    connect, shake hands and send within what is left of it (the TLS handshake and ``sendall`` of
    Python's sockets are bounded as a whole by the socket's timeout)."""
    # pylint: disable=import-outside-toplevel
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def new_conn(base):
        class Connection(base):
            def _new_conn(self):
                self.timeout = deadline.remaining()
                sock = super()._new_conn()
                sock.settimeout(deadline.remaining())
                deadline.opened(sock)
                return sock

            def connect(self):
                super().connect()
                deadline.opened(self.sock)  # the TLS socket, which took the plain one's place

        return Connection

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = new_conn(HTTPConnection)

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = new_conn(HTTPSConnection)

    pools = {"http": HTTPPool, "https": HTTPSPool}

    class DeadlineAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = dict(pools)

        def proxy_manager_for(self, proxy, **proxy_kwargs):
            manager = super().proxy_manager_for(proxy, **proxy_kwargs)
            if not proxy.lower().startswith("socks"):  # a SOCKS proxy's pools speak SOCKS
                manager.pool_classes_by_scheme = dict(pools)
            return manager

    return DeadlineAdapter()
