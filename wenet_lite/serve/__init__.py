"""`wenet-lite serve`: a websocket server for live streaming recognition (server.py), its
options (options.py), the HTTP side and admission (gate.py), the workers' shared counters and
supervision (workers.py), the sherpa-onnx and WeNet protocols it speaks (protocols.py) and its
browser page (static/)."""

from wenet_lite.serve.options import ServerOptions
from wenet_lite.serve.server import Secrets, Server, serve

__all__ = ["Secrets", "Server", "ServerOptions", "serve"]
