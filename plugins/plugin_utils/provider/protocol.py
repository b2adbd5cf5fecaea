# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Compose provider protocol, as the ``stella`` command speaks it (no I/O of its own but the
streams it is given).

- :class:`Channel`: JSON lines on stdout, gated by ``COMPOSE_PROVIDER_MESSAGES`` (absent: only
  ``info``, ``error``, ``setenv``, ``debug``), requests answered on stdin (EOF: the running Compose
  does not support provider requests).
- :class:`ChunkedReader`: the chunked ``image-stream`` of ``get-image``, decoded incrementally; a
  stream without its zero-length chunk is truncated and raises.
- :func:`pull_decision`: what ``pull`` does with the verdict Compose sends.
- :class:`ProviderError`: a failure reported to Compose as the one ``error`` line.

The command line Compose sends and the metadata of every command are :mod:`.arguments`; the release
input of the service and the facts dependents receive, :mod:`.service`.
"""

from __future__ import annotations

import json
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

BASE_MESSAGES = ("info", "error", "setenv", "debug")
# Messages that only render progress: left out when Compose does not announce them.
PROGRESS_MESSAGES = ("info", "debug")
_CHUNK_SIZE = re.compile(rb"^[0-9A-Fa-f]{1,16}\Z")


class ProviderError(StellaError):
    """A failure reported to Compose as the one ``error`` line."""


def pull_decision(source, policy, known, digest=None):
    """What ``pull`` does (pure): ``"up_to_date"``, ``"load"`` (ask Compose for the local image's bytes)
    or ``"resolve"`` (resolve the reference in its registry). ``known``: the bookkeeping entry of the
    image (``{}`` when none); ``digest``: the local daemon cache's id Compose announced.

    - ``source=local``: the desired state is the local daemon's image, so the announced digest must be
      the one ingested, whatever the policy (an ``up --build`` that rebuilt the image is loaded again);
      without an announced digest, ``missing`` takes any version already ingested, ``always`` loads;
    - ``source=registry``: ``policy=missing`` (the ``up`` path) takes a version already ingested,
      ``policy=always`` (``docker compose pull``) resolves the reference anew.
    """
    if policy not in ("missing", "always"):
        raise ProviderError("invalid_option", "--policy must be missing or always, not %r" % (policy,))
    ingested = bool(known) and known.get("source") == source
    if source == "local":
        if ingested and (known.get("digest") == digest if digest else policy == "missing"):
            return "up_to_date"
        return "load"
    if ingested and policy == "missing" and known.get("digest"):
        return "up_to_date"
    return "resolve"


def allowed_messages(environ):
    """The message types this Compose accepts: ``COMPOSE_PROVIDER_MESSAGES``, else the base four."""
    announced = environ.get("COMPOSE_PROVIDER_MESSAGES")
    if announced is None:
        return frozenset(BASE_MESSAGES)
    return frozenset(item.strip() for item in announced.split(",") if item.strip())


class Channel:
    """JSON lines to Compose on ``out``; answers from Compose on ``inp`` (binary streams)."""

    def __init__(self, out, inp, environ):
        self.out = out
        self.inp = inp
        self.allowed = allowed_messages(environ)
        self.sent = []

    def can(self, kind):
        return kind in self.allowed

    def send(self, kind, message, **extra):
        """Emit one message; ``True`` when it was sent. A progress message (``info``, ``debug``) this
        Compose did not announce is left out (``False``): it only renders. Any other kind it did not
        announce fails loudly (``compose_unsupported``): the result would be incomplete without it."""
        if not self.can(kind):
            if kind in PROGRESS_MESSAGES:
                return False
            raise ProviderError(
                "compose_unsupported",
                "this Compose does not announce %s in COMPOSE_PROVIDER_MESSAGES, and the result needs it" % kind,
            )
        if kind in ("setenv", "rawsetenv") and "=" not in message:
            raise ProviderError("internal_error", "%s message without '=' would abort Compose" % kind)
        line = dict({"type": kind, "message": " ".join(str(message).split()) if kind == "error" else message}, **extra)
        self.out.write(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        self.out.flush()
        self.sent.append(line)
        return True

    def request(self, kind, message=None, **extra):
        """Send a request and read its one-line JSON answer; EOF means this Compose cannot answer."""
        if not self.can(kind):
            raise ProviderError(
                "compose_unsupported", "this Compose does not announce %s in COMPOSE_PROVIDER_MESSAGES" % kind
            )
        line = {"type": kind}
        if message is not None:
            line["message"] = message
        line.update(extra)
        self.out.write(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        self.out.flush()
        answer = self.inp.readline()
        if not answer:
            raise ProviderError(
                "compose_unsupported",
                "Compose did not answer %s (its stdin closed): this Compose "
                "version does not support provider requests" % kind,
            )
        try:
            return json.loads(answer)
        except ValueError:
            raise ProviderError("compose_protocol", "Compose answered %s with a line that is not JSON" % kind) from None


class TruncatedStream(ProviderError):
    pass


class ChunkedReader:
    """HTTP/1.1 chunked data from ``stream`` (RFC 9112 7.1) without trailers or a final CRLF: the byte
    after the zero-length chunk belongs to the next answer. :meth:`chunks` yields the data in pieces
    of at most ``piece`` bytes, so memory stays constant."""

    def __init__(self, stream, piece=1 << 16):
        self.stream = stream
        self.piece = piece
        self.total = 0

    def _line(self):
        line = self.stream.readline(4096)
        if not line.endswith(b"\n"):
            raise TruncatedStream(
                "image_stream_truncated",
                "the image stream ended before its last chunk (after %d bytes); it was discarded" % self.total,
            )
        return line

    def chunks(self):
        while True:
            header = self._line().rstrip(b"\r\n").split(b";", 1)[0]
            if not _CHUNK_SIZE.match(header):  # hex digits only: no sign, prefix, spaces or underscores
                raise ProviderError("image_stream_invalid", "bad chunk size line %r" % header[:40])
            size = int(header, 16)
            if size == 0:
                return
            left = size
            while left:
                data = self.stream.read(min(left, self.piece))
                if not data:
                    raise TruncatedStream(
                        "image_stream_truncated",
                        "the image stream ended inside a chunk (after %d bytes); it was discarded" % self.total,
                    )
                left -= len(data)
                self.total += len(data)
                yield data
            if self.stream.read(2) != b"\r\n":
                raise TruncatedStream(
                    "image_stream_truncated",
                    "a chunk of the image stream was not terminated (after %d bytes); it was discarded" % self.total,
                )
