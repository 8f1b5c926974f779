"""`wenet-lite serve`: a websocket server for live streaming recognition (server.py), the
sherpa-onnx and WeNet protocols it speaks (protocols.py) and its browser page (static/)."""

from wenet_lite.serve.server import Server, ServerOptions, serve

__all__ = ["Server", "ServerOptions", "serve"]
