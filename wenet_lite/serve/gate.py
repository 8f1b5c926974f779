"""What `wenet-lite serve` answers over plain HTTP, and who may open a websocket.

The page and its scripts answer GET and HEAD (405 otherwise); ``/health`` gives JSON: rows of
the server's one table of plain routes (``routes.py``). A
websocket upgrade must come from an allowed origin (browsers send ``Origin``; a client that
sends none, such as sherpa-onnx's or WeNet's, is not a page and is let in): the server's own
origin always, pages on localhost when no list is given, else the listed origins (``*``: any).
With a token, an upgrade must carry it as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``
(compared in constant time). Responses name no software version and never echo the request.
"""

from __future__ import annotations

import hmac
import ssl
from dataclasses import dataclass
from importlib import resources
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from wenet_lite.serve.http_front import HttpResponse, RequestHead

__all__ = ["Gate", "PAGES", "WEBSOCKET_PATHS", "bearer_token", "read_token", "tls_context"]

PAGES = {  # HTTP path -> (file in wenet_lite/serve/static, content type)
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


def bearer_token(headers: Mapping[str, str], query: Optional[Dict[str, List[str]]] = None) -> str:
    """The token a request carries: ``Authorization: Bearer TOKEN`` (lower-case header names),
    else, where ``query`` is given (a websocket, which a browser cannot give headers),
    ``?token=TOKEN``; "" for none."""
    header = headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return ((query or {}).get("token") or [""])[0]


@dataclass(frozen=True)
class Gate:
    """The HTTP side of one worker: pages, the token, and the checks of a websocket upgrade."""

    allowed_origins: Tuple[str, ...] = ()
    token: Optional[str] = None
    worker: int = 0
    workers: int = 1

    def authorized(self, given: str) -> bool:
        """Whether ``given`` is the server's token (compared in constant time; any without a
        token): the one check of every route that needs it."""
        if self.token is None:
            return True
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def page(self, path: str) -> HttpResponse:
        """The page or script at ``path`` (one of :data:`PAGES`)."""
        name, mime = PAGES[path]
        text = resources.files("wenet_lite.serve").joinpath("static", name).read_text("utf-8")
        if name == "index.html":
            text = text.replace(_WORKER_MARK, f"page served by worker {self.worker} of "
                                f"{self.workers}")  # fmt: skip
        return HttpResponse(200, text.encode("utf-8"), mime)

    def refusal(self, head: RequestHead) -> Optional[HttpResponse]:
        """An HTTP response refusing a websocket upgrade, or None to let it through."""
        if not self.origin_allowed(head.headers.get("origin"), head.headers.get("host")):
            return HttpResponse.text(403, "this page's origin may not open a websocket here")
        if not self.authorized(bearer_token(head.headers, head.query)):
            return HttpResponse.text(
                401, "a token is needed: 'Authorization: Bearer TOKEN' or ?token=TOKEN",
                **{"WWW-Authenticate": "Bearer"},
            )  # fmt: skip
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


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The server's TLS context; ValueError naming the file that cannot be used."""
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
