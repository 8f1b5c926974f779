"""What `wenet-lite serve` answers over plain HTTP, and who may open a websocket.

The page and its scripts answer GET and HEAD (405 otherwise); ``/health`` gives JSON. A
websocket upgrade must come from an allowed origin (browsers send ``Origin``; a client that
sends none, such as sherpa-onnx's or WeNet's, is not a page and is let in): the server's own
origin always, pages on localhost when no list is given, else the listed origins (``*``: any).
With a token, an upgrade must carry it as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``
(compared in constant time). Responses name no software version and never echo the request.
"""

from __future__ import annotations

import hmac
import http
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

__all__ = ["Gate", "WEBSOCKET_PATHS", "read_token", "tls_context"]

_STATIC = {  # HTTP path -> (file in wenet_lite/serve/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
}
WEBSOCKET_PATHS = {"/": "sherpa", "/sherpa": "sherpa", "/wenet": "wenet",
                   "/v1/realtime": "realtime"}  # fmt: skip
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
_WORKER_MARK = "<!--worker-->"
"""index.html's place for the line that names the worker that served it"""


@dataclass(frozen=True)
class Gate:
    """The HTTP side of one worker: pages, and the checks of a websocket upgrade."""

    allowed_origins: Tuple[str, ...] = ()
    token: Optional[str] = None
    worker: int = 0
    workers: int = 1

    def page(
        self, connection: Any, method: str, path: str, health: Callable[[], Dict[str, Any]]
    ) -> Any:
        """The response to a plain HTTP request (``health()`` gives /health's JSON)."""
        import json

        if method not in ("GET", "HEAD"):
            r = connection.respond(http.HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD\n")
            r.headers["Allow"] = "GET, HEAD"
        elif path == "/health":
            r = connection.respond(http.HTTPStatus.OK, json.dumps(health()))
            r = _typed(r, "application/json")
        elif path in _STATIC:
            name, mime = _STATIC[path]
            text = resources.files("wenet_lite.serve").joinpath("static", name).read_text("utf-8")
            if name == "index.html":
                text = text.replace(_WORKER_MARK, self._served_by())
            r = _typed(connection.respond(http.HTTPStatus.OK, text), mime)
        else:
            r = connection.respond(http.HTTPStatus.NOT_FOUND, "no such page\n")
        if method == "HEAD":
            r.body = b""  # Content-Length still gives the body's size
        return r

    def _served_by(self) -> str:
        return f"page served by worker {self.worker} of {self.workers}"

    def refusal(self, connection: Any, request: Any) -> Optional[Any]:
        """An HTTP response refusing a websocket upgrade, or None to let it through."""
        if not self.origin_allowed(request.headers.get("Origin"), request.headers.get("Host")):
            return connection.respond(
                http.HTTPStatus.FORBIDDEN, "this page's origin may not open a websocket here\n"
            )
        if self.token is not None and not hmac.compare_digest(
            _given_token(request).encode("utf-8"), self.token.encode("utf-8")
        ):
            r = connection.respond(
                http.HTTPStatus.UNAUTHORIZED,
                "a token is needed: 'Authorization: Bearer TOKEN' or ?token=TOKEN\n",
            )
            r.headers["WWW-Authenticate"] = "Bearer"
            return r
        return None

    def origin_allowed(self, origin: Optional[str], host: Optional[str]) -> bool:
        if origin is None:
            return True  # not a browser page
        if "*" in self.allowed_origins or origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        if host is not None and parts.netloc.lower() == host.lower():
            return True  # the page this server served
        return not self.allowed_origins and (parts.hostname or "") in _LOCAL_HOSTS


def _given_token(request: Any) -> str:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    query = parse_qs(urlsplit(request.path).query)
    return (query.get("token") or [""])[0]


def _typed(response: Any, mime: str) -> Any:
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = mime
    return response


def tls_context(certfile: str, keyfile: str) -> Any:
    """The server's TLS context; ValueError naming the file that cannot be used."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile, keyfile)
    except FileNotFoundError as e:
        raise ValueError(f"{e.filename or certfile}: no such file") from None
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"{certfile} / {keyfile}: not a PEM certificate and its private key ({e})"
        ) from None
    return context


def read_token(path: str) -> str:
    """The token in ``path`` (its first line, stripped); ValueError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such token file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the token ({e})") from None
    if not token:
        raise ValueError(f"{path}: the token file is empty")
    return token
