#!/usr/bin/env python3
"""Score the output of `wenet-lite stream --json` against a prepared test set.

Usage:
    python tools/score_stream.py --stream exp/x/stream16.jsonl --data data/test-clean \
        --out exp/x/decode/test-clean/stream16 [--compare exp/x/decode/test-clean/chunk16_sim]
    python tools/score_stream.py --text exp/x/export/ts16.txt --data data/test-clean \
        --out exp/x/decode/test-clean/ts16

--text reads ``PATH TEXT`` lines instead, as tools/run_exported.py --names and
tools/run_sherpa.py print them.

Joins the final segments of each file (in segment order) into one transcript, names it by the
file's utterance id (its name without extension, as in LibriSpeech), and writes ``hyp.txt``
(``id text``) and ``summary.txt`` (WER and CER lines in `wenet-lite decode`'s format) to --out.
--compare DIR reads DIR/hyp.txt (e.g. from `decode --simulate-streaming`) and reports how many
transcripts are identical; with --require-identical a difference is an error (exit code 1).
Stream errors (type "error") are counted as failed utterances.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.decode.wer import format_summary, score_utterance


def utt_id(name: str) -> str:
    """LibriSpeech utterance id of an audio path: its file name without extensions."""
    return Path(name).name.split(".")[0]


def read_stream(path: Path) -> Tuple[Dict[str, str], List[str]]:
    """({utterance id: transcript}, [failed ids]) from JSON lines of `wenet-lite stream --json`."""
    segments: Dict[str, List[Tuple[int, str]]] = {}
    failed: List[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if obj["type"] == "final":
            segments.setdefault(utt_id(obj["file"]), []).append((obj["segment"], obj["text"]))
        elif obj["type"] == "error":
            failed.append(utt_id(obj["file"]))
    texts = {
        uid: " ".join(t for _, t in sorted(parts) if t).strip() for uid, parts in segments.items()
    }
    return texts, failed


def read_text_lines(path: Path) -> Dict[str, str]:
    """{utterance id: transcript} from ``PATH TEXT`` lines (a path holds no spaces here)."""
    out: Dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, text = line.partition(" ")
        if name:
            out[utt_id(name)] = " ".join(text.split())
    return out


def read_hyp(path: Path) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        uid, _, text = line.partition(" ")
        if uid:
            out[uid] = text.strip()
    return out


def compare(ours: Dict[str, str], other_dir: Path) -> Tuple[int, int, List[str]]:
    """(identical, compared, differing ids) over the utterances both sides decoded."""
    other = read_hyp(other_dir / "hyp.txt")
    common = sorted(set(ours) & set(other))
    differ = [u for u in common if ours[u] != other[u]]
    return len(common) - len(differ), len(common), differ


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--stream", type=Path, help="JSON lines of `stream --json`")
    source.add_argument("--text", type=Path, help="PATH TEXT lines of an exported-model runner")
    p.add_argument("--data", type=Path, required=True, help="prepared part (cuts.jsonl.gz)")
    p.add_argument("--out", type=Path, required=True, help="output dir")
    p.add_argument("--compare", type=Path, help="a decode dir whose hyp.txt to compare with")
    p.add_argument("--require-identical", action="store_true", help="exit 1 on any difference")
    args = p.parse_args(argv)

    refs = {c.id: normalize_text(cut_text(c)) for c in load_cuts(args.data)}
    if args.stream is not None:
        hyps, failed = read_stream(args.stream)
    else:
        hyps, failed = read_text_lines(args.text), []
    unknown = sorted(set(hyps) - set(refs))
    if unknown:
        raise SystemExit(f"error: {len(unknown)} streamed file(s) not in {args.data}: {unknown[0]}")
    scores = [score_utterance(u, refs[u], hyps[u]) for u in sorted(hyps)]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "hyp.txt", "w", encoding="utf-8") as f:
        for u in sorted(hyps):
            f.write(f"{u} {hyps[u]}".rstrip() + "\n")
    origin = f"streamed {args.stream}" if args.stream is not None else f"read {args.text}"
    lines = [origin, *format_summary(scores), f"failed {len(failed)}"]
    status = 0
    if args.compare is not None:
        same, total, differ = compare(hyps, args.compare)
        lines.append(f"identical to {args.compare / 'hyp.txt'}: {same}/{total}")
        if differ:
            lines.append(f"first difference: {differ[0]}")
            status = 1 if args.require_identical else 0
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    missing = len(refs) - len(hyps)
    if missing:
        print(f"note: {missing} utterance(s) of {args.data} were not streamed", file=sys.stderr)
    return status or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
