"""`wenet-lite transcribe`."""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from wenet_lite.cli import flags
from wenet_lite.cli.flags import UsageError
from wenet_lite.fileio import write_text_atomic

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".sph", ".aiff", ".aif", ".au")
"""the files a directory given to `transcribe` contributes"""


def add_transcribe(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.search.options import SearchOptions
    from wenet_lite.transcription import FORMATS

    p = sub.add_parser(
        "transcribe",
        help="transcribe audio files to text or subtitles",
        description="usage: wenet-lite transcribe --model exp/u2/avg_5.pt a.wav [b.flac ...] "
        "[--format txt|json|srt|vtt|tsv] [--out DIR]\n"
        "       wenet-lite transcribe --model M recordings/ --format srt --out subs\n"
        "       cat a.wav | wenet-lite transcribe --model M -\n\n"
        "Without --out each file's text goes to stdout, one line per file (preceded by the "
        "file name and a tab when there are several; other formats print whole). With --out, "
        "DIR/<file stem>.<format> per file. Full context by default (a long file in windows of "
        "bounded memory), segments cut at pauses; --chunk-size C streams at the model's own "
        "latency with endpointing. A directory contributes its audio files, a quoted glob its "
        "matches; '-' reads an audio file from stdin. A bad file is named on stderr and "
        "skipped (exit code 1). --model may also be an export directory (it streams).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="AUDIO", help="files, directories, globs or -")
    p.add_argument("--model", required=True, help="model file, or an export directory")
    p.add_argument("--format", choices=FORMATS, default="txt", help="output format (txt)")
    p.add_argument("--out", type=flags.output_dir, help="write DIR/<stem>.<format> per file")
    flags.add_chunking(p, 0, 4, full=True)
    flags.add_options(p, SearchOptions, skip=("nbest",))
    flags.add_endpoint(p)
    p.add_argument(
        "--pause", type=float, default=0.8,
        help="full context: seconds between words that start a segment (0.8)",
    )  # fmt: skip
    p.add_argument("--device", default="cpu", help=flags.DEVICE_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    flags.add_upsample(p)
    flags.add_engine(p, "--chunk-size C: ")
    flags.add_punct(p, "the text, words and subtitles cased and punctuated")
    flags.add_itn(p, "the text, words and subtitles")
    p.add_argument(
        "--speakers", metavar="N|auto", type=_speakers,
        help="full context: label every segment and word with its speaker (S1, S2, ...; the "
        "speakers extra: CAM++ embeddings clustered): N speakers, or auto to estimate how "
        "many; json, tsv, srt, vtt (voice tags) and txt (a line per turn) carry the labels",
    )  # fmt: skip
    vad = p.add_argument_group("voice activity detection (full context)")
    vad.add_argument(
        "--vad", choices=("auto", "on", "off"), default="auto",
        help="decode only the speech regions Silero VAD finds, in batches (auto: on where "
        "silero-vad is installed; off: the whole file; --vad-threshold applies)",
    )  # fmt: skip
    vad.add_argument("--vad-min-speech-ms", type=int, metavar="MS", default=250,
                     help="shorter speech is dropped (250)")  # fmt: skip
    vad.add_argument("--vad-min-silence-ms", type=int, metavar="MS", default=2000,
                     help="silence that ends a speech region (2000)")  # fmt: skip
    vad.add_argument("--vad-pad-ms", type=int, metavar="MS", default=400,
                     help="audio kept on each side of a speech region (400)")  # fmt: skip
    p.set_defaults(func=_run_transcribe)


def _speakers(value: str):
    """``auto`` or a number of speakers (>= 1)."""
    return value if value == "auto" else flags.positive_int(value)


def expand_inputs(inputs: List[str]) -> Tuple[List[str], List[str]]:
    """The files of the arguments (directories' audio files, globs' matches, ``-``), in order
    and each once; and the arguments that name nothing."""
    files: List[str] = []
    missing: List[str] = []
    for item in inputs:
        path = Path(item)
        if item == "-" or path.is_file():
            found = [item]
        elif path.is_dir():
            found = sorted(str(f) for f in path.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES)
        else:
            found = _glob_files(item) if glob.has_magic(item) else []
        if not found:
            missing.append(item)
        files.extend(f for f in found if f not in files)
    return files, missing


def _glob_files(pattern: str) -> List[str]:
    """The files a glob matches, ``**`` included, without following links to directories
    (``glob.glob`` follows them, and two links to ``.`` make its walk exponential)."""
    parts = Path(pattern).parts
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    anchor = Path(*parts[:fixed]) if fixed else Path(".")
    rest = str(Path(*parts[fixed:]))
    return sorted(str(p) for p in anchor.glob(rest) if p.is_file())


def output_names(files: List[str], fmt: str) -> Dict[str, str]:
    """The output file name of each input: ``<stem>.<fmt>``; where inputs share a stem, the
    later ones ``<stem>_<n>.<fmt>`` with the first ``n`` whose name no input takes by its own
    stem, so one input's output never replaces another's."""
    stems = ["stdin" if f == "-" else Path(f).stem for f in files]
    taken = {f"{s}.{fmt}" for s in stems}  # every input's own name, reserved up front
    names: Dict[str, str] = {}
    used = set()
    for f, stem in zip(files, stems):
        name = f"{stem}.{fmt}"
        n = 1
        while name in used or (n > 1 and name in taken):
            n += 1
            name = f"{stem}_{n}.{fmt}"
        used.add(name)
        names[f] = name
    return names


def _run_transcribe(args: argparse.Namespace) -> int:
    from wenet_lite.features.audio import AudioError
    from wenet_lite.search.options import SearchOptions
    from wenet_lite.speakers.campp import SpeakerModelError
    from wenet_lite.transcription import Transcriber, format_transcript

    files, missing = expand_inputs(args.inputs)
    for item in missing:
        print(f"wenet-lite transcribe: error: {item}: no such file, or no audio in it",
              file=sys.stderr)  # fmt: skip
    if files.count("-") and len(files) > 1 and args.out is None and args.format != "txt":
        raise UsageError("several inputs with stdin: give --out")
    search = flags.options_from(SearchOptions, args)
    chunking = flags.chunking_from(args)
    from wenet_lite.vad.silero import VadOptions

    if args.vad == "on" and chunking.streaming:
        raise UsageError(
            "--vad on works in full context; with --chunk-size the VAD ends segments: give "
            "--vad-silence S"
        )
    try:
        vad_options = VadOptions(args.vad_threshold, args.vad_min_speech_ms,
                                 args.vad_min_silence_ms, args.vad_pad_ms)  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e).replace("vad ", "--vad-").replace("_", "-")) from None
    vad = {"on": True, "off": False, "auto": None}[args.vad]
    if args.speakers is not None and chunking.streaming:
        raise UsageError("--speakers works in full context; leave out --chunk-size")
    spec = flags.engine_spec(args, flags.device_from(args.device))
    from wenet_lite.recognizer import RuleError

    try:
        transcriber = Transcriber(  # the device and threads travel in the engine's spec
            args.model, chunking.chunk_size, chunking.left_chunks, search,
            flags.endpoint_from(args), pause=args.pause, engine=spec,
            progress=not args.no_progress and sys.stderr.isatty(), upsample=args.upsample,
            punct=args.punct, vad=vad if not chunking.streaming else False, itn=args.itn,
            vad_options=vad_options, speakers=args.speakers,
        )  # fmt: skip
    except RuleError as e:  # checked before anything is loaded
        raise flags.rule_error(e) from None
    except SpeakerModelError as e:
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    failed = len(missing)
    several = len(files) > 1
    bar = None
    if not args.no_progress and len(files) > 1 and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="file", file=sys.stderr, leave=False)
    targets = output_names(files, args.format) if out is not None else {}
    written = 0
    for name in files:
        try:
            t = transcriber.file(name)
        except (AudioError, FileNotFoundError) as e:
            failed += 1
            message = str(e) if name in str(e) else f"{name}: {e}"
            print(f"wenet-lite transcribe: error: {message}", file=sys.stderr, flush=True)
            continue
        finally:
            if bar is not None:
                bar.update(1)
        text = format_transcript(t, args.format)
        if out is not None:
            write_text_atomic(out / targets[name], text)  # a kill never leaves a cut file
            written += 1
        elif args.format == "txt" and not t.labelled:
            print(f"{name}\t{t.text}" if several else t.text, flush=True)
        else:
            if several and args.format != "json":
                print(f"==> {name} <==", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
    if bar is not None:
        bar.close()
    if out is not None:
        print(f"{written} file(s) written to {out}")
    return 1 if failed else 0
