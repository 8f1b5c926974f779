"""`wenet-lite serve`."""

from __future__ import annotations

import argparse

from wenet_lite.cli.decode import add_engine
from wenet_lite.cli.flags import (
    UsageError,
    add_chunking,
    add_endpoint,
    add_options,
    endpoint_from,
    non_negative,
    options_from,
    port_number,
    positive_int,
)


def add_serve(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.decode.options import SearchOptions

    p = sub.add_parser(
        "serve",
        help="websocket server for live streaming recognition (sherpa-onnx and WeNet clients, "
        "a browser page)",
        description="usage: wenet-lite serve --model exp/u2/avg_5.pt [--port 6006] "
        "[--chunk-size 16] [--left-chunks -1] [--lm LM]\n\n"
        "Serves streaming recognition on ws://HOST:PORT/ in sherpa-onnx's online websocket "
        "protocol (binary float32 samples at 16 kHz, 'Done' at the end; its clients work "
        "unchanged) and on /wenet in WeNet's (start signal, int16 PCM, end signal). "
        "http://HOST:PORT/ is a page that streams the microphone or a file; /health gives "
        "counters as JSON. Every ready stream of every connection is decoded in one batched "
        "encoder call per step, off the event loop. Stop with SIGTERM or Ctrl-C: open streams "
        "get their final results first.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="model file (checkpoint or averaged), or an export directory"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=port_number, default=6006, help="0: any free port (6006)")
    add_chunking(p, 16, -1)
    add_options(p, SearchOptions, skip=("nbest",))
    add_endpoint(p)
    p.add_argument(
        "--max-connections", type=positive_int, default=1000,
        help="more are refused with HTTP 503 and the reason (1000)",
    )  # fmt: skip
    p.add_argument(
        "--max-batch-size", type=positive_int, default=256,
        help="streams decoded in one encoder call (256)",
    )  # fmt: skip
    p.add_argument(
        "--max-wait-ms", type=non_negative, default=0.0,
        help="wait this long for more audio before each decode step (0)",
    )  # fmt: skip
    p.add_argument(
        "--max-message-size", type=positive_int, default=1 << 20,
        help="bytes; a larger message closes its connection (1048576)",
    )  # fmt: skip
    p.add_argument(
        "--idle-timeout", type=non_negative, default=30.0,
        help="s without a message before a client's input is ended (30; 0: never)",
    )  # fmt: skip
    p.add_argument(
        "--log-interval", type=non_negative, default=10.0, help="s between load lines (10)"
    )
    p.add_argument(
        "--workers", type=positive_int, default=1,
        help="processes serving the port (1; up to the number of cores: each adds a decode "
        "thread free of the others' Python lock)",
    )  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
    add_engine(p)
    p.set_defaults(func=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from wenet_lite.cli.decode import recognizer_from
    from wenet_lite.decode.options import SearchOptions
    from wenet_lite.serve import ServerOptions, serve

    endpoint = endpoint_from(args)
    options = options_from(SearchOptions, args)
    try:
        server_options = ServerOptions(
            args.host, args.port, args.max_connections, args.max_batch_size, args.max_wait_ms,
            args.max_message_size, args.idle_timeout, args.log_interval, args.workers,
        )  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from None
    recognizer = recognizer_from(args, options, endpoint)
    return serve(recognizer, server_options, threads=args.threads)
