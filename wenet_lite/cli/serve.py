"""`wenet-lite serve`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, Optional

from wenet_lite.cli.flags import (
    DEVICE_HELP,
    add_chunking,
    add_endpoint,
    add_engine,
    add_itn,
    add_options,
    add_punct,
    check_recognizer_flags,
    device_from,
    endpoint_from,
    options_from,
    recognizer_from,
)

if TYPE_CHECKING:
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.runtime.streaming import StreamingRecognizer
    from wenet_lite.search.options import SearchOptions


def add_serve(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.search.options import SearchOptions
    from wenet_lite.serve.options import ServerOptions

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
    add_options(p, ServerOptions)
    add_chunking(p, 16, 4)
    add_options(p, SearchOptions, skip=("nbest",))
    add_endpoint(p)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    add_engine(p)
    add_punct(
        p,
        "every protocol's final results and uploads cased and punctuated (partial results "
        "as recognised)",
    )
    add_itn(p, "every protocol's final results and uploads (partial results as recognised)")
    p.set_defaults(func=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from wenet_lite.search.options import SearchOptions
    from wenet_lite.serve import Secrets, ServerOptions, serve

    endpoint = endpoint_from(args)
    options = options_from(SearchOptions, args)
    server_options = options_from(ServerOptions, args)
    if not server_options.model_id:  # the OpenAI API's model id: the model's name
        import dataclasses
        from pathlib import Path

        name = Path(args.model.rstrip("/"))
        model_id = name.name if name.is_dir() else name.stem
        server_options = dataclasses.replace(server_options, model_id=model_id)
    secrets = Secrets.load(server_options)  # a bad certificate or token file: before loading
    vad = server_options.vad if server_options.openai_api else "off"  # uploads, Realtime turns
    if server_options.workers > 1 and _on_cuda(args.device):
        recognizer = _made_in_each_worker(args, options, endpoint, vad)
    else:
        recognizer = recognizer_from(args, options, endpoint, announce=True, vad=vad)
    return serve(recognizer, server_options, threads=args.threads, secrets=secrets)


def _on_cuda(name: Optional[str]) -> bool:
    """Whether ``--device`` names a GPU, asking the driver (NVML), not CUDA: this process forks
    workers later, and a CUDA context cannot cross a fork."""
    import os

    if name is None or not name.startswith(("cuda", "auto")):
        return False
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # torch.cuda asks NVML, starts nothing
    return device_from(name).startswith("cuda")


def _made_in_each_worker(
    args: argparse.Namespace, options: SearchOptions, endpoint: EndpointConfig, vad: str
) -> Callable[[], StreamingRecognizer]:
    """For `--jobs N` on a GPU: the flags and the model file are checked here, on the CPU,
    before any worker starts; each worker then loads the model onto the GPU itself."""
    from wenet_lite.files.model_file import load_model

    check_recognizer_flags(args)
    load_model(args.model)  # a bad model file is named once, here
    return lambda: recognizer_from(args, options, endpoint, announce=True, vad=vad)
