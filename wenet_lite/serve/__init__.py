"""`wenet-lite serve`: a websocket server for live streaming recognition (server.py: the site,
admission, monitoring), the one HTTP front that owns its port (http_front.py: request heads by
h11, websocket upgrades handed to websockets), its table of plain routes (routes.py), websocket
sessions (sessions.py), the open streams and their decode loop (hub.py) and decode thread
(decode_thread.py), a stream's state and its peer (connection.py), its options (options.py),
pages, tokens and origins (gate.py), the workers' shared counters and supervision
(workers.py) and their accepting by load (accept.py), the sherpa-onnx and WeNet protocols it
speaks (protocols.py), an upload's form parsed as it arrives (upload_form.py), OpenAI's
transcription API (openai_api.py; uploads in full context: uploads.py) and Realtime sessions
(realtime.py), and its browser page (static/)."""

from typing import TYPE_CHECKING, Any

__all__ = ["Secrets", "Server", "ServerOptions", "serve"]

if TYPE_CHECKING:
    from wenet_lite.serve.options import ServerOptions
    from wenet_lite.serve.server import Secrets, Server, serve


def __getattr__(name: str) -> Any:
    # Lazy: the CLI reads ServerOptions' flags without loading the server and its decoder.
    if name == "ServerOptions":
        from wenet_lite.serve.options import ServerOptions

        return ServerOptions
    if name in ("Secrets", "Server", "serve"):
        from wenet_lite.serve import server

        return getattr(server, name)
    raise AttributeError(f"module 'wenet_lite.serve' has no attribute {name!r}")
