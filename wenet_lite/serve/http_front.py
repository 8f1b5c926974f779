"""The server's one HTTP front: it owns every connection of the port, reads its request's head
with h11, answers plain routes itself and hands a websocket upgrade to websockets' Sans-I/O
``ServerProtocol`` and its public asyncio ``Connection``.

A connection is counted from its first byte to its close, whatever becomes of it, and bounded
in time and work:

- **Admission.** ``Site.opened`` decides when the connection arrives; a refused one is answered
  (503 and the reason) as soon as its first bytes come, then closed: a flood of refused
  connections holds no descriptor longer than that (or than the head's deadline).
- **The head** (request line and headers, at most 64 KiB) must be complete within
  ``head_timeout`` seconds of the connection, however its bytes trickle in (408, closed): a
  client sending a byte every few seconds cannot hold a connection slot.
- **A body** (a route that takes one, as the transcription upload) goes to the route's
  :class:`BodySink` as it arrives, up to its limit (413); ``idle_s`` seconds without a byte of
  it is 408. No body is held in memory by the front.
- One request a connection (``Connection: close``). An early reply (a refusal, a bad or too
  large body, a timeout) is followed by our end of the stream and a short linger in which what
  the client still sends is read and dropped, so that the client reads the reply.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import typing
from dataclasses import dataclass, field
from typing import (
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
from websockets.asyncio.connection import Connection
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

__all__ = ["BodyError", "BodySink", "HttpFront", "HttpRequest", "HttpResponse", "PlainRoute",
           "RequestHead", "Site", "WebSocketSettings"]  # fmt: skip

_log = logging.getLogger("wenet_lite.serve")
_MAX_HEAD = 64 * 1024
_LINGER_S = 2.0
"""after an early reply, how long what a client still sends is read and dropped"""
_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Content Too Large", 415: "Unsupported Media Type", 429: "Too Many Requests",
    431: "Request Header Fields Too Large", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable",
}  # fmt: skip


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


@dataclass(frozen=True)
class RequestHead:
    """A request's line and headers, as the routes see them."""

    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Dict[str, str]
    """lower-case names"""
    peer: str
    length: int
    """the declared body length (-1: chunked)"""

    @property
    def upgrade(self) -> bool:
        """A websocket handshake."""
        return self.headers.get("upgrade", "").lower() == "websocket"


@dataclass(frozen=True)
class HttpRequest(RequestHead, Generic[S]):
    """A request with its body read to its end into the route's sink."""

    body: S
    """the route's sink, finished"""


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
    def text(cls, status: int, message: str, **headers: str) -> HttpResponse:
        return cls(status, f"{message}\n".encode(), "text/plain; charset=utf-8", headers)


@dataclass(frozen=True)
class PlainRoute:
    """A row of the server's table of plain HTTP routes."""

    method: str
    """GET (HEAD is answered too), POST, or * (any)"""
    path: str
    answer: Callable[[HttpRequest], Awaitable[HttpResponse]]
    prefix: bool = False
    """the path and anything under it (``/v1/models/ID``)"""
    refuse: Optional[Callable[[RequestHead], Optional[HttpResponse]]] = None
    """before a body is read: a response refusing the request, or None"""
    body: Optional[Callable[[RequestHead], BodySink]] = None
    """a route that takes a body: where it goes (None: a body is not read)"""
    max_body: int = 0
    body_error: Callable[[BodyError], HttpResponse] = lambda e: HttpResponse.text(e.status, str(e))

    def matches(self, path: str) -> bool:
        return path == self.path or (self.prefix and path.startswith(self.path.rstrip("/") + "/"))


@dataclass(frozen=True)
class WebSocketSettings:
    """websockets' connection settings (its defaults, but for the limits)."""

    max_size: int
    max_queue: int
    write_limit: int
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    close_timeout: float = 10.0


class Site(typing.Protocol):
    """What the front asks of the server."""

    routes: List[PlainRoute]
    websocket: WebSocketSettings
    head_timeout: float
    idle_timeout: float

    def opened(self, peer: str) -> Optional[str]:
        """A connection from ``peer`` arrived (counted until :meth:`closed`): why it cannot be
        served now (answered 503), or None."""

    def closed(self, peer: str) -> None:
        """The connection from ``peer`` is gone."""

    def upgrade(self, head: RequestHead) -> Optional[HttpResponse]:
        """A websocket handshake's refusal (unknown path, origin, token), or None."""

    async def serve_websocket(self, connection: Connection) -> None:
        """Run a websocket connection until it ends (its handshake done)."""


class HttpFront(asyncio.Protocol):
    """One connection of the server's port (module doc)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        self.transport: Optional[asyncio.Transport] = None
        self.peer = "?"
        self.refused: Optional[str] = None
        self.raw = bytearray()  # the bytes before the head's end (handed on with an upgrade)
        self.route: Optional[PlainRoute] = None
        self.request: Optional[HttpRequest] = None
        self.sink: Optional[BodySink] = None
        self.received = 0
        self.task: Optional[asyncio.Future] = None
        self.timer: Optional[asyncio.TimerHandle] = None
        self.last_data = 0.0
        self.counted = False

    # --- the connection's life ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)
        address = transport.get_extra_info("peername")
        self.peer = str(address[0]) if address else "?"
        self.counted = True
        self.refused = self.site.opened(self.peer)
        loop = asyncio.get_running_loop()
        self.last_data = loop.time()
        self.timer = loop.call_later(self.site.head_timeout, self._head_late)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self._stop_timer()
        if self.sink is not None:
            self.sink.discard()
        self._uncount()

    def _uncount(self) -> None:
        if self.counted:
            self.counted = False
            self.site.closed(self.peer)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _head_late(self) -> None:
        self.timer = None
        if self.task is None and self.request is None:
            timeout = self.site.head_timeout
            self._reply_now(HttpResponse.text(408, f"the request's head took over {timeout:g} s"))

    def _body_idle(self) -> None:
        self.timer = None
        if self.task is not None:
            return
        loop = asyncio.get_running_loop()
        idle = loop.time() - self.last_data
        if idle < self.site.idle_timeout:
            self.timer = loop.call_later(self.site.idle_timeout - idle, self._body_idle)
            return
        timeout = self.site.idle_timeout
        self._reply_now(HttpResponse.text(408, f"no bytes of the request for {timeout:g} s"))

    # --- reading -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.task is not None:
            return  # after the reply (or its start): dropped
        if self.refused is not None:
            self._reply_now(HttpResponse.text(503, f"{self.refused}; retry later"))
            return
        self.last_data = asyncio.get_running_loop().time()
        if self.request is None and self.route is None:
            self.raw += data
        self.h11.receive_data(data)
        try:
            self._events()
        except h11.RemoteProtocolError as e:
            status = 431 if "incomplete event" in str(e) else e.error_status_hint
            self._reply_now(HttpResponse.text(status, f"malformed request: {e}"))
        except BodyError as e:
            assert self.route is not None
            self._reply_now(self.route.body_error(e))

    def _events(self) -> None:
        while self.task is None:
            event = self.h11.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._head(event)
            elif isinstance(event, h11.Data):
                self._store(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._complete()
            else:  # the client closed its side before the end of its request
                return

    def _head(self, event: h11.Request) -> None:
        """The head is complete: an upgrade handed on, a plain route's request begun."""
        self._stop_timer()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        url = urlsplit(event.target.decode("latin-1"))
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = -1 if chunked else int(headers.get("content-length", "0"))  # h11 checked it
        head = RequestHead(event.method.decode("latin-1"), url.path, parse_qs(url.query),
                           headers, self.peer, length)  # fmt: skip
        if head.upgrade and head.method == "GET":
            self._upgrade(head)
            return
        route, refusal = self._route(head)
        if refusal is not None:
            self._reply_now(refusal)
            return
        assert route is not None
        self.route = route
        self.sink = route.body(head) if route.body is not None else _NO_BODY
        fields = {f.name: getattr(head, f.name) for f in dataclasses.fields(head)}
        self.request = HttpRequest(**fields, body=self.sink)
        if route.body is not None:
            self.timer = asyncio.get_running_loop().call_later(self.site.idle_timeout,
                                                               self._body_idle)  # fmt: skip

    def _route(self, head: RequestHead) -> Tuple[Optional[PlainRoute], Optional[HttpResponse]]:
        """The route of a plain request, or the response that refuses it."""
        found = [r for r in self.site.routes if r.matches(head.path)]
        if not found:
            return None, HttpResponse.text(404, "no such page")
        method = "GET" if head.method == "HEAD" else head.method
        route = next((r for r in found if r.method in (method, "*")), None)
        if route is None:
            methods = {r.method for r in found}
            allowed = sorted(methods | ({"HEAD"} if "GET" in methods else set()))
            refusal = HttpResponse.text(405, f"only {', '.join(allowed)} here")
            refusal.headers["Allow"] = ", ".join(allowed)
            return None, refusal
        refusal = route.refuse(head) if route.refuse is not None else None
        if refusal is None and route.body is not None and head.length > route.max_body:
            refusal = HttpResponse.text(413, "too large")
        return route, refusal

    def _store(self, piece: bytes) -> None:
        """Body bytes to the sink; BodyError past the route's limit."""
        if self.route is None or self.route.body is None:
            return  # a body where the route takes none: read and dropped
        assert self.sink is not None
        self.received += len(piece)
        if self.received > self.route.max_body:
            raise BodyError(413, f"the body is over {self.route.max_body} bytes")
        self.sink.write(piece)

    def _complete(self) -> None:
        assert self.sink is not None and self.request is not None and self.route is not None
        self._stop_timer()
        self.sink.finish()
        assert self.transport is not None
        self.transport.pause_reading()
        self.task = asyncio.ensure_future(self._answer(self.route, self.request))

    # --- a websocket ----------------------------------------------------------------------

    def _upgrade(self, head: RequestHead) -> None:
        """The handshake checked, answered by websockets, and the connection handed to it."""
        refusal = self.site.upgrade(head)
        if refusal is not None:
            self._reply_now(refusal)
            return
        assert self.transport is not None
        settings = self.site.websocket
        trailing, _ = self.h11.trailing_data
        raw = bytes(self.raw[: len(self.raw) - len(trailing)])
        sansio = ServerProtocol(max_size=settings.max_size)  # websockets' own state machine
        sansio.receive_data(raw)
        (request,) = sansio.events_received()
        response = sansio.accept(request)
        sansio.send_response(response)
        self.transport.write(b"".join(sansio.data_to_send()))
        if sansio.state is not OPEN:  # a malformed handshake: answered 400
            _Writer(self.transport, self.h11).close_after_linger()
            return
        connection = Connection(
            sansio, ping_interval=settings.ping_interval, ping_timeout=settings.ping_timeout,
            close_timeout=settings.close_timeout, max_queue=settings.max_queue,
            write_limit=settings.write_limit,
        )  # fmt: skip
        connection.request = request
        self.transport.set_protocol(connection)
        connection.connection_made(self.transport)
        if trailing:
            connection.data_received(bytes(trailing))
        self.task = asyncio.ensure_future(self._websocket(connection))

    async def _websocket(self, connection: Connection) -> None:
        """Run the server's handler on an open websocket; the connection counts until its
        session ends (its closing handshake follows)."""
        try:
            connection.start_keepalive()
            async with connection:
                try:
                    await self.site.serve_websocket(connection)
                finally:
                    self._uncount()
        except Exception:  # noqa: BLE001 - logged; the connection is dropped
            _log.exception("a websocket handler failed")
            if connection.transport is not None:
                connection.transport.abort()
        finally:
            self._uncount()

    # --- writing ---------------------------------------------------------------------------

    async def _answer(self, route: PlainRoute, request: HttpRequest) -> None:
        try:
            response = await route.answer(request)
        except Exception:  # a bug: the client gets a 500, the server goes on
            _log.exception("HTTP %s %s failed", request.method, request.path)
            error = {"message": "internal error", "type": "server_error", "param": None,
                     "code": None}  # fmt: skip
            response = HttpResponse.json(500, {"error": error})
        await self._send(response)

    def _reply_now(self, response: HttpResponse) -> None:
        """Answer before the request was read to its end: the reply, our end of the stream,
        then the close after a moment in which what the client still sends is dropped (closed
        at once, unread bytes would make the kernel reset the connection and the client
        could lose the reply)."""
        self._stop_timer()
        self.task = asyncio.ensure_future(self._send(response, linger=True))

    async def _send(self, response: HttpResponse, linger: bool = False) -> None:
        if self.transport is not None:
            bare = self.request is not None and self.request.method == "HEAD"
            await _Writer(self.transport, self.h11).send(response, linger, bare)


class _Writer:
    """A response written to a connection (h11 frames it where it read the request)."""

    def __init__(self, transport: asyncio.Transport, conn: h11.Connection) -> None:
        self.transport, self.h11 = transport, conn

    def _head_bytes(self, response: HttpResponse) -> Tuple[bytes, bool]:
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

    async def send(self, response: HttpResponse, linger: bool, bare: bool) -> None:
        """The response (``bare``: its head alone, for HEAD), then the close (``linger``:
        after our end of the stream and a moment)."""
        t = self.transport
        if t.is_closing():
            return
        head, framed = self._head_bytes(response)
        t.write(head)

        def frame(piece: bytes) -> bytes:
            return (self.h11.send(h11.Data(data=piece)) or b"") if framed else piece

        if bare:
            pass  # HEAD: the length of the body, no body
        elif isinstance(response.body, (bytes, bytearray)):
            t.write(frame(bytes(response.body)))
        else:
            async for piece in response.body:
                if t.is_closing():
                    return
                t.write(frame(piece))
        if framed:
            t.write(self.h11.send(h11.EndOfMessage()) or b"")
        if linger:
            self.close_after_linger()
            return
        t.close()

    def close_after_linger(self) -> None:
        t = self.transport
        if not t.can_write_eof():
            t.close()
            return
        try:
            t.write_eof()
        except OSError:  # the client is gone already
            t.close()
            return
        t.resume_reading()  # data_received drops it: a task is set
        asyncio.get_running_loop().call_later(_LINGER_S, t.close)


class _NoBody:
    """The sink of a route that takes no body."""

    def write(self, data: bytes) -> None:
        pass

    def finish(self) -> None:
        pass

    def discard(self) -> None:
        pass


_NO_BODY = _NoBody()
