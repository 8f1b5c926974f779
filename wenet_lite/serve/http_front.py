"""Plain HTTP requests other than GET on the websocket server's port (OpenAI's POST API).

websockets answers GET and HEAD only (upgrades, the page, ``/health``). A connection's first
bytes decide: a request of another method leaves websockets' connection for an
:class:`HttpExchange`, which reads one request (headers up to 64 KiB, a body up to its limit,
``Content-Length`` or chunked), passes it to an async handler and writes its response. The websocket
connection left behind is closed as if its peer had gone, so websockets forgets it.

A body goes to a temporary file as it arrives (uploads in flight hold no memory: 40 clients
each holding 95 MB unsent grew the server by 5 GB when bodies were buffered) and reaches the
handler as a read-only memory map of that file. A request that sends nothing for ``idle_s``
seconds (the server's ``--idle-timeout``) gets 408 and is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mmap
import tempfile
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterator, Optional, Union
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection

__all__ = ["ChunkedBody", "HttpExchange", "HttpRequest", "HttpResponse", "front_connection"]

_log = logging.getLogger("wenet_lite.serve")
_MAX_HEAD = 64 * 1024
_LINGER_S = 2.0
"""after an early reply, how long what a client still sends is read and dropped"""
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass
class HttpRequest:
    method: str
    path: str
    query: Dict[str, list]
    headers: Dict[str, str]
    """lower-case names"""
    body: Union[bytes, mmap.mmap]
    """the body, a read-only map of the file it was spooled to (empty: b"")"""
    peer: str


@dataclass
class HttpResponse:
    status: int
    body: Union[bytes, Iterator[bytes], Any] = b""
    """bytes, or an async iterator of chunks (sent chunked, e.g. server-sent events)"""
    content_type: str = "application/json"
    headers: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, value: Any, **headers: str) -> HttpResponse:
        return cls(status, json.dumps(value, ensure_ascii=False).encode(), headers=headers)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
Refusal = Callable[[str, Dict[str, str], int], Optional[HttpResponse]]


class HttpExchange(asyncio.Protocol):
    """One HTTP/1.1 request and its response on a connection, then the connection closes."""

    def __init__(self, handler: Handler, refuse: Refusal, max_body: int, idle_s: float = 0.0,
                 on_close: Optional[Callable[[], None]] = None) -> None:  # fmt: skip
        self.handler, self.refuse, self.max_body = handler, refuse, max_body
        self.idle_s, self.on_close = idle_s, on_close
        self.buffer = bytearray()  # the head, until it is complete
        self.head: Optional[Dict[str, Any]] = None
        self.spool: Any = None  # the body's temporary file
        self.chunked: Optional[ChunkedBody] = None  # Transfer-Encoding: chunked
        self.received = 0
        self.transport: Any = None
        self.task: Optional[asyncio.Task] = None
        self.last_data = 0.0
        self.watch: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        loop = asyncio.get_event_loop()
        self.last_data = loop.time()
        if self.idle_s > 0:
            self.watch = loop.call_later(self.idle_s, self._check_idle)

    def _check_idle(self) -> None:
        if self.task is not None or self.transport.is_closing():
            return
        loop = asyncio.get_event_loop()
        idle = loop.time() - self.last_data
        if idle < self.idle_s:
            self.watch = loop.call_later(self.idle_s - idle, self._check_idle)
            return
        text = f"no bytes of the request for {self.idle_s:g} s\n".encode()
        self._reply_now(HttpResponse(408, text, "text/plain"))

    def data_received(self, data: bytes) -> None:
        if self.task is not None:
            return  # more than one request: only the first is answered
        self.last_data = asyncio.get_event_loop().time()
        if self.head is None:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._reply_now(HttpResponse(413, b"request headers too large\n", "text/plain"))
                return
            self.head = self._parse_head(bytes(self.buffer[:end]))
            data, self.buffer = bytes(self.buffer[end + 4 :]), bytearray()
            if self.head is None:
                return
            self.spool = tempfile.TemporaryFile(prefix="wenet-lite-upload-")
            if self.head["chunked"]:
                self.chunked = ChunkedBody(self._store)
        try:
            if self.chunked is not None:
                complete = self.chunked.feed(data)
            else:
                self._store(data[: self.head["length"] - self.received])
                complete = self.received >= self.head["length"]
        except _BodyError as e:
            self._reply_now(HttpResponse(e.status, f"{e}\n".encode(), "text/plain"))
            return
        if complete:
            self.transport.pause_reading()
            self.task = asyncio.ensure_future(self._answer(self._body()))

    def _store(self, piece: bytes) -> None:
        """Body bytes to the spool file; _BodyError past the size limit or on a full disk."""
        self.received += len(piece)
        if self.received > self.max_body:
            raise _BodyError(413, f"the body is over {self.max_body} bytes")
        try:
            self.spool.write(piece)
        except OSError as e:  # a full disk: this request fails, the server goes on
            _log.warning("cannot spool an upload: %s", e)
            raise _BodyError(503, "cannot store the upload now") from None

    def _body(self) -> Union[bytes, mmap.mmap]:
        self.spool.flush()
        if not self.received:
            return b""
        return mmap.mmap(self.spool.fileno(), self.received, access=mmap.ACCESS_READ)

    def _parse_head(self, raw: bytes) -> Optional[Dict[str, Any]]:
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._reply_now(HttpResponse(400, b"not an HTTP/1.1 request\n", "text/plain"))
            return None
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                self._reply_now(HttpResponse(400, b"malformed header line\n", "text/plain"))
                return None
            headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        try:  # a chunked body's length is known at its end (a Content-Length beside is ignored)
            length = 0 if chunked else int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self._reply_now(HttpResponse(400, b"bad Content-Length\n", "text/plain"))
            return None
        url = urlsplit(parts[1])
        refusal = self.refuse(url.path, headers, length)
        if refusal is None and length > self.max_body:
            refusal = HttpResponse(413, b"too large\n", "text/plain")
        if refusal is not None:
            self._reply_now(refusal)
            return None
        return {
            "method": parts[0],
            "path": url.path,
            "query": parse_qs(url.query),
            "headers": headers,
            "length": length,
            "chunked": chunked,
        }

    async def _answer(self, body: Union[bytes, mmap.mmap]) -> None:
        assert self.head is not None
        peer = self.transport.get_extra_info("peername")
        request = HttpRequest(
            self.head["method"],
            self.head["path"],
            self.head["query"],
            self.head["headers"],
            body,
            str(peer[0]) if peer else "?",
        )
        try:
            response = await self.handler(request)
        except Exception:  # a bug: the client gets a 500, the server goes on
            _log.exception("HTTP %s %s failed", request.method, request.path)
            response = HttpResponse.json(
                500,
                {
                    "error": {
                        "message": "internal error",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        await self._send(response)
        if isinstance(body, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still held: unmapped with it
                body.close()

    def _reply_now(self, response: HttpResponse) -> None:
        """Answer before the request was read to its end (a refusal, a bad or too large body,
        a timeout): the reply, then our side's end, then the connection closes after a
        moment in which what the client still sends is read and dropped. Closed at once, the
        unread bytes would make the kernel reset the connection, and the client could lose
        the reply."""
        self.task = asyncio.ensure_future(self._send(response, linger=True))

    async def _send(self, response: HttpResponse, linger: bool = False) -> None:
        t = self.transport
        headers = {"Content-Type": response.content_type, "Connection": "close", **response.headers}
        chunked = not isinstance(response.body, (bytes, bytearray))
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
            headers["Cache-Control"] = "no-cache"
        else:
            headers["Content-Length"] = str(len(response.body))
        reason = _REASONS.get(response.status, "")
        head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        if t.is_closing():
            return
        t.write((head + "\r\n").encode("latin-1"))
        if chunked:
            async for piece in response.body:
                if t.is_closing():
                    return
                t.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            t.write(b"0\r\n\r\n")
        else:
            t.write(bytes(response.body))
        if linger and t.can_write_eof():
            t.write_eof()
            t.resume_reading()  # data_received drops it: a task is set
            asyncio.get_running_loop().call_later(_LINGER_S, t.close)
            return
        t.close()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.watch is not None:
            self.watch.cancel()
        if self.spool is not None:
            with contextlib.suppress(OSError, BufferError):
                self.spool.close()
        if self.on_close is not None:
            self.on_close()
            self.on_close = None


class _BodyError(Exception):
    """A body that cannot be taken: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ChunkedBody:
    """A ``Transfer-Encoding: chunked`` body decoded as it arrives (RFC 9112, 7.1): each
    chunk's data goes to ``write`` as soon as it is here, so nothing holds more than the bytes
    of one read; :meth:`feed` says when the body (and its trailers) ended, and raises
    _BodyError (400) for a malformed one."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self.write = write
        self.buffer = bytearray()
        self.state, self.left = "size", 0

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        while True:
            if self.state == "data":
                n = min(self.left, len(self.buffer))
                if n:
                    self.write(bytes(self.buffer[:n]))
                    del self.buffer[:n]
                    self.left -= n
                if self.left:
                    return False
                self.state = "crlf"
            if self.state == "crlf":
                if len(self.buffer) < 2:
                    return False
                if self.buffer[:2] != b"\r\n":
                    raise _BodyError(400, "a chunk's data is not followed by CRLF")
                del self.buffer[:2]
                self.state = "size"
            if self.state == "trailers":
                return self._trailers_end()
            if not self._size_line():
                return False

    def _size_line(self) -> bool:
        """Read a chunk-size line; False when it has not arrived whole yet."""
        end = self.buffer.find(b"\r\n")
        if end < 0:
            if len(self.buffer) > 1024:
                raise _BodyError(400, "a chunk-size line of over 1 KB")
            return False
        text = bytes(self.buffer[:end]).split(b";")[0].strip()
        del self.buffer[: end + 2]
        if not text or not all(c in b"0123456789abcdefABCDEF" for c in text):
            raise _BodyError(400, f"chunk size {text[:20]!r} is not hexadecimal")
        size = int(text, 16)
        self.state, self.left = ("data", size) if size else ("trailers", 0)
        return True

    def _trailers_end(self) -> bool:
        if self.buffer[:2] == b"\r\n" or self.buffer.find(b"\r\n\r\n") >= 0:
            return True
        if len(self.buffer) > _MAX_HEAD:
            raise _BodyError(400, "trailers of over 64 KiB")
        return False


class _Detached:
    """What the abandoned websocket connection holds instead of the transport."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def front_connection(make_exchange: Callable[[Any], Optional[HttpExchange]]) -> type:
    """A websockets connection class that hands a request of another method than GET or HEAD
    to ``make_exchange(peer address)`` (None: websockets answers it, i.e. refuses it)."""

    class FrontConnection(ServerConnection):
        _sniffed = False
        _head = b""

        def data_received(self, data: bytes) -> None:
            if self._sniffed:
                super().data_received(data)
                return
            self._head += data
            if b" " not in self._head[:16] and len(self._head) < 16:
                return  # the method is not complete yet
            self._sniffed = True
            data, self._head = self._head, b""
            method = data.split(b" ", 1)[0]
            peer = self.transport.get_extra_info("peername")
            exchange = None if method in (b"GET", b"HEAD") else make_exchange(peer)
            if exchange is None:
                super().data_received(data)
                return
            transport = self.transport
            transport.set_protocol(exchange)
            exchange.connection_made(transport)
            self.transport = _Detached()
            super().connection_lost(None)  # websockets forgets this connection
            exchange.data_received(data)

    return FrontConnection
