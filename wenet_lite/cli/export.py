"""`wenet-lite export`."""

from __future__ import annotations

import argparse

from wenet_lite.cli.flags import (
    UsageError,
    add_chunking,
    chunking_from,
    file_in,
    in_dir,
    output_path,
)


def add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export for on-device inference (TorchScript, ONNX for sherpa-onnx, ExecuTorch)",
        description="usage: wenet-lite export --model exp/u2/avg_5.pt --format torchscript "
        "--out exp/u2/model.ts\n"
        "       wenet-lite export --model exp/u2/avg_5.pt --format onnx --chunk-size 16 "
        "--left-chunks 4 --out exp/u2/onnx [--int8]\n"
        "       wenet-lite export --model exp/u2/avg_5.pt --format executorch --chunk-size 16 "
        "--left-chunks 4 --out exp/u2/et [--int8]\n\n"
        "torchscript: one file with init_state/forward_chunk/forward and its metadata; run it "
        "with examples/run_exported.py (no wenet_lite needed). --chunk-size full exports a "
        "full-context model for whole utterances only.\n"
        "onnx: DIR/model.onnx, DIR/tokens.txt (and model.int8.onnx) for "
        "sherpa_onnx.OnlineRecognizer.from_wenet_ctc, given the same chunk_size and "
        "num_left_chunks; needs --left-chunks >= 0. The directory also holds batched.onnx, "
        "tokenizer.model and wenet_lite.json, so `wenet-lite stream --model DIR` runs it on "
        "onnxruntime without the model file.\n"
        "executorch: DIR/model.pte (and model.int8.pte: linears in int8 scaled per frame), "
        "lowered to XNNPACK, for `wenet-lite stream --model DIR [--precision int8]`, "
        "open_recognizer(DIR) and ExecuTorch runtimes; needs executorch.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model file (checkpoint or averaged)")
    p.add_argument("--format", required=True, choices=["torchscript", "onnx", "executorch"])
    p.add_argument(
        "--out", type=output_path, required=True,
        help="onnx, executorch: output directory; torchscript: output file (a directory: "
        "DIR/model.ts)",
    )  # fmt: skip
    add_chunking(p, 16, 4, full=True)
    p.add_argument(
        "--int8", dest="quantize", action="store_const", const="int8",
        help="also write the int8 model (linear weights in int8, activations scaled per frame)",
    )  # fmt: skip
    # The former spelling, still read: `--quantize int8`.
    p.add_argument("--quantize", choices=["int8"], help=argparse.SUPPRESS)
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    chosen = chunking_from(args)
    chunking = dict(chunk_size=chosen.chunk_size, left_chunks=chosen.left_chunks)
    if args.format == "torchscript":
        from wenet_lite.export.torchscript import export_torchscript

        out = in_dir(args.out, "model.ts")
        written = [export_torchscript(args.model, out, **chunking, quantize=args.quantize)]
    elif args.format == "executorch":
        from wenet_lite.export.executorch import export_executorch

        print(f"lowering to ExecuTorch{' (fp32 and int8)' if args.quantize else ''} ...")
        written = list(
            export_executorch(args.model, args.out, **chunking, quantize=args.quantize).values()
        )
    else:
        from wenet_lite.export.onnx import export_onnx

        written = list(
            export_onnx(args.model, args.out, **chunking, quantize=args.quantize).values()
        )
    for path in written:
        print(path)
    return 0


def add_import_wenet(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.wenet.download import PRETRAINED

    names = "\n".join(
        f"  {name:12} {p.about}; eps {p.norm_eps:g}" for name, p in PRETRAINED.items()
    )
    p = sub.add_parser(
        "import-wenet",
        help="import a pretrained WeNet U2/U2++ conformer as a model file",
        description="usage: wenet-lite import-wenet --download librispeech --out MODEL.pt\n"
        "       wenet-lite import-wenet DIR --out MODEL.pt [--norm-eps 1e-12]\n\n"
        "DIR is a WeNet model directory as WeNet publishes it: final.pt, train.yaml, "
        "units.txt, global_cmvn and, for English models, a sentencepiece model (without it "
        "the model imports for decoding; hotwords, LM words and train --init want it). "
        "--download NAME fetches WeNet's checkpoint archive of that name (resumable, its "
        "sha256 recorded on first download and checked after), unpacks it in the cache and "
        "imports it with the LayerNorm epsilon it was trained with. MODEL.pt is an ordinary "
        "model file: transcribe, decode, stream, serve, export and train --init take it. Its "
        "outputs are WeNet's own (absolute key positions, WeNet's conv padding, final norm, "
        "ReLU decoder, features with snip_edges and the whole band).\n\n"
        f"Names for --download (WeNet's docs/pretrained_models.en.md):\n{names}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model_dir", metavar="DIR", nargs="?", help="WeNet model directory")
    p.add_argument(
        "--download", metavar="NAME|URL",
        help="a WeNet checkpoint by name (listed above) or archive URL, instead of DIR",
    )  # fmt: skip
    p.add_argument(
        "--cache", metavar="DIR",
        help="where --download keeps archives (default: $XDG_CACHE_HOME/wenet_lite/wenet, "
        "else ~/.cache/wenet_lite/wenet)",
    )  # fmt: skip
    p.add_argument(
        "--out", type=file_in("model.pt"), required=True,
        help="model file to write (a directory: DIR/model.pt)",
    )  # fmt: skip
    p.add_argument(
        "--norm-eps", type=float, default=None,
        help="LayerNorm epsilon the model was trained with: 1e-5 (WeNet since 2022-01) or "
        "1e-12 (before). Default: the table's for --download NAME; else from the evidence "
        "(train.yaml's layout, a date in DIR's name), warning when it is a guess",
    )  # fmt: skip
    p.add_argument("--bpe", help="the BPE model, when DIR holds none or several *.model files")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_import_wenet)


def _run_import_wenet(args: argparse.Namespace) -> int:
    import sys

    from wenet_lite.wenet.convert import import_wenet
    from wenet_lite.wenet.download import PRETRAINED, download_model

    if (args.model_dir is None) == (args.download is None):
        raise UsageError("give a WeNet model directory DIR or --download NAME, one of them")
    model_dir, eps = args.model_dir, args.norm_eps
    if args.download is not None:
        progress = not args.no_progress and sys.stderr.isatty()
        model_dir = download_model(args.download, args.cache, progress)
        if eps is None and args.download in PRETRAINED:
            eps = PRETRAINED[args.download].norm_eps
    print(import_wenet(model_dir, args.out, eps, args.bpe))
    return 0
