"""Plain HTTP requests other than GET on the websocket server's port (OpenAI's POST API),
read and written by h11.

websockets answers GET and HEAD only (upgrades, the page, ``/health``). A connection's first
bytes decide: a request of another method leaves websockets' connection for an
:class:`HttpExchange`, which reads one request with ``h11`` (headers up to 64 KiB, a body up to
its limit, ``Content-Length`` or chunked), hands the body as it arrives to a :class:`BodySink`
the route opened for it, passes the request (with its finished sink) to an async handler and
writes its response. The websocket connection left behind is closed as if its peer had gone,
so websockets forgets it.

No body is held in memory: the API's sink parses multipart/form-data as it arrives and writes
the file part straight to a temporary file (40 clients each holding 95 MB unsent grew the
server by 5 GB when bodies were buffered). A request that sends nothing for ``idle_s`` seconds
(the server's idle timeout) gets 408 and is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import typing
from dataclasses import dataclass, field
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Tuple,
    TypeVar,
    Union,
)
from urllib.parse import parse_qs, urlsplit

import h11
from websockets.asyncio.server import ServerConnection

__all__ = ["BodyError", "BodySink", "HttpExchange", "HttpRequest", "HttpResponse",
           "front_connection"]  # fmt: skip

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
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


class BodyError(Exception):
    """A body that cannot be taken: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BodySink(typing.Protocol):
    """Where a request's body goes as it arrives."""

    def write(self, data: bytes) -> None:
        """Take the next bytes (BodyError: refuse the request)."""

    def finish(self) -> None:
        """The body is complete (BodyError: it is malformed)."""

    def discard(self) -> None:
        """The request is over: remove what was stored and not taken by the handler."""


S = TypeVar("S", bound=BodySink)


@dataclass
class HttpRequest(Generic[S]):
    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Dict[str, str]
    """lower-case names"""
    body: S
    """the route's sink, finished"""
    peer: str


@dataclass
class HttpResponse:
    status: int
    body: Union[bytes, AsyncIterator[bytes]] = b""
    """bytes, or an async iterator of chunks (sent chunked, e.g. server-sent events)"""
    content_type: str = "application/json"
    headers: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, value: object, **headers: str) -> HttpResponse:
        return cls(status, json.dumps(value, ensure_ascii=False).encode(), headers=headers)

    @classmethod
    def text(cls, status: int, message: str) -> HttpResponse:
        return cls(status, f"{message}\n".encode(), "text/plain")


Handler = Callable[[HttpRequest[S]], Awaitable[HttpResponse]]
Refusal = Callable[[str, Dict[str, str], int], Optional[HttpResponse]]
"""(path, headers, declared length or -1 for chunked) -> a response that refuses it, or None"""
Opener = Callable[[Dict[str, str]], S]
"""a request's headers -> the sink its body goes to (BodyError: refused)"""


class HttpExchange(asyncio.Protocol, Generic[S]):
    """One HTTP/1.1 request and its response on a connection, then the connection closes."""

    def __init__(self, handler: Handler, refuse: Refusal, open_body: Opener, max_body: int,
                 idle_s: float = 0.0, on_close: Optional[Callable[[], None]] = None,
                 error: Callable[[BodyError], HttpResponse] = lambda e: HttpResponse.text(
                     e.status, str(e))) -> None:  # fmt: skip
        self.handler, self.refuse, self.open_body, self.error = handler, refuse, open_body, error
        self.max_body, self.idle_s, self.on_close = max_body, idle_s, on_close
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        self.request: Optional[HttpRequest] = None
        self.sink: Optional[S] = None
        self.received = 0
        self.transport: Any = None
        self.task: Optional[asyncio.Future] = None
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
        self._reply_now(HttpResponse.text(408, f"no bytes of the request for {self.idle_s:g} s"))

    def data_received(self, data: bytes) -> None:
        if self.task is not None:
            return  # more than one request: only the first is answered
        self.last_data = asyncio.get_event_loop().time()
        self.h11.receive_data(data)
        try:
            while self.task is None:
                event = self.h11.next_event()
                if event is h11.NEED_DATA:
                    return
                if isinstance(event, h11.Request):
                    self._begin(event)
                elif isinstance(event, h11.Data):
                    self._store(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    assert self.sink is not None and self.request is not None
                    self.sink.finish()
                    self.transport.pause_reading()
                    self.task = asyncio.ensure_future(self._answer(self.request))
                else:  # the client closed its side before the end of its request
                    return
        except h11.RemoteProtocolError as e:
            status = 431 if "incomplete event" in str(e) else e.error_status_hint
            self._reply_now(HttpResponse.text(status, f"malformed request: {e}"))
        except BodyError as e:
            self._reply_now(self.error(e))

    def _begin(self, event: h11.Request) -> None:
        """The request's head: refused (the reply set), or its body's sink opened."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        url = urlsplit(event.target.decode("latin-1"))
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = -1 if chunked else int(headers.get("content-length", "0"))  # h11 checked it
        refusal = self.refuse(url.path, headers, length)
        if refusal is None and length > self.max_body:
            refusal = HttpResponse.text(413, "too large")
        if refusal is not None:
            self._reply_now(refusal)
            return
        self.sink = self.open_body(headers)
        peer = self.transport.get_extra_info("peername")
        self.request = HttpRequest(event.method.decode("latin-1"), url.path, parse_qs(url.query),
                                   headers, self.sink, str(peer[0]) if peer else "?")  # fmt: skip

    def _store(self, piece: bytes) -> None:
        """Body bytes to the sink; BodyError past the size limit."""
        assert self.sink is not None
        self.received += len(piece)
        if self.received > self.max_body:
            raise BodyError(413, f"the body is over {self.max_body} bytes")
        self.sink.write(piece)

    async def _answer(self, request: HttpRequest) -> None:
        try:
            response = await self.handler(request)
        except Exception:  # a bug: the client gets a 500, the server goes on
            _log.exception("HTTP %s %s failed", request.method, request.path)
            error = {"message": "internal error", "type": "server_error", "param": None,
                     "code": None}  # fmt: skip
            response = HttpResponse.json(500, {"error": error})
        await self._send(response)

    def _reply_now(self, response: HttpResponse) -> None:
        """Answer before the request was read to its end (a refusal, a bad or too large body,
        a timeout): the reply, then our side's end, then the connection closes after a
        moment in which what the client still sends is read and dropped. Closed at once, the
        unread bytes would make the kernel reset the connection, and the client could lose
        the reply."""
        self.task = asyncio.ensure_future(self._send(response, linger=True))

    def _head(self, response: HttpResponse) -> Tuple[bytes, bool]:
        """The response's head, and whether h11 frames the body (it cannot answer a request
        it failed to read: that reply is written by hand, its body delimited by the close)."""
        headers: List[Tuple[str, str]] = [("Content-Type", response.content_type),
                                          ("Connection", "close")]  # fmt: skip
        if isinstance(response.body, (bytes, bytearray)):
            headers.append(("Content-Length", str(len(response.body))))
        else:  # h11 sends it chunked (HTTP/1.1) or to the close (HTTP/1.0)
            headers.append(("Cache-Control", "no-cache"))
        headers += list(response.headers.items())
        reason = _REASONS.get(response.status, "")
        try:
            event = h11.Response(status_code=response.status, headers=headers, reason=reason)
            return self.h11.send(event) or b"", True
        except h11.LocalProtocolError:
            lines = [f"HTTP/1.1 {response.status} {reason}"] + [f"{k}: {v}" for k, v in headers]
            return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), False

    async def _send(self, response: HttpResponse, linger: bool = False) -> None:
        t = self.transport
        if t.is_closing():
            return
        head, framed = self._head(response)
        t.write(head)

        def frame(piece: bytes) -> bytes:
            return (self.h11.send(h11.Data(data=piece)) or b"") if framed else piece

        if isinstance(response.body, (bytes, bytearray)):
            t.write(frame(bytes(response.body)))
        else:
            async for piece in response.body:
                if t.is_closing():
                    return
                t.write(frame(piece))
        if framed:
            t.write(self.h11.send(h11.EndOfMessage()) or b"")
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
        if self.sink is not None:
            self.sink.discard()
        if self.on_close is not None:
            self.on_close()
            self.on_close = None


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
