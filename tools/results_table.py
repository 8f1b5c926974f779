#!/usr/bin/env python3
"""Collect an experiment's decoding results into RESULTS.md (WeNet README table format).

Usage:
    python tools/results_table.py --exp exp/synthetic --model exp/synthetic/avg_5.pt \
        --train-data data/synthetic/train-clean-100 --test data/synthetic/test-clean \
        [--test data/other-part ...] [--note "text"] [--out exp/synthetic/RESULTS.md]

Reads EXP/decode/<test part>/<mode>/summary.txt, where <mode> is ``full`` (``full_lm``: with
the word LM), ``chunkC``
(chunk-masked forward), ``chunkC_sim`` (`decode --simulate-streaming`), ``streamC``
(`wenet-lite stream`, scored by tools/score_stream.py; ``chunkC_sim_lm``/``streamC_lm``: both
with the word LM) or ``tsC``/``sherpaC`` (+``_int8``:
the exported models streamed by tools/run_exported.py and tools/run_sherpa.py), and writes
one table row per mode and chunk size with WER and CER per test set. Also reports the
unseen-word rate of each test set (reference words that never occur in the training
transcripts) and how many of those the full-context decode got right, the training run
(steps, wall time, speed, last dev WERs, from EXP/train.log), the model size, and links to
training.png and alignment.png when present. Prints the table too.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

_RATE = re.compile(r"^(WER|CER) ([\d.]+) %", re.M)
_IDENTICAL = re.compile(r"identical to .*: (\d+)/(\d+)")
_MODE = re.compile(
    r"^(full(_lm)?|chunk(\d+)(_sim)?|stream(\d+)|(ts|sherpa)(\d+)(_int8)?)$"
    r"|^(chunk(\d+)_sim|stream(\d+))_lm$"  # streaming with the word LM
)
_EXPORTED = {
    "ts": "exported TorchScript (`tools/run_exported.py`)",
    "sherpa": "exported ONNX in sherpa-onnx (`tools/run_sherpa.py`)",
}
_STEP = re.compile(r"^(\S+ \S+) .*step (\d+): loss ([\d.]+) .* audio ([\d.]+) s/s", re.M)
_SEARCH = re.compile(  # DecodeOptions.describe of an LM decode
    r"^search prefix_beam \((beam [^)]*)\)(, blank penalty [-\d.]+)? \+ LM (\S+) \(([^)]*)\)",
    re.M,
)
_DEV = re.compile(r"^\S+ \S+ .*epoch (\d+) dev: (\d+) utts, loss ([\d.]+), (.*)$", re.M)


def mode_key(name: str) -> Tuple[int, int, int]:
    """Sort order: full first (greedy, then with the LM), then by decreasing chunk; masked,
    simulated, streamed; then the exported models (TorchScript, sherpa-onnx; fp32, int8)."""
    m = _MODE.match(name)
    assert m is not None
    if m.group(9):  # with the LM: after the same chunk's greedy rows
        return (1, -int(m.group(10) or m.group(11)), 3 + bool(m.group(11)))
    if m.group(1).startswith("full"):
        return (0, 0, int(bool(m.group(2))))
    if m.group(6):
        return (2, 2 * (m.group(6) == "sherpa") + bool(m.group(8)), -int(m.group(7)))
    chunk = int(m.group(3) or m.group(5))
    kind = 0 if m.group(3) and not m.group(4) else (1 if m.group(4) else 2)
    return (1, -chunk, kind)


def describe(name: str, search: str = " (`decode --lm`)") -> Tuple[str, str]:
    """(decoding mode, chunk column) of a mode dir name; ``search``: the LM decode's LM file
    and settings."""
    m = _MODE.match(name)
    assert m is not None
    if m.group(9):
        how = "simulated streaming" if m.group(10) else "streamed (`wenet-lite stream --lm`)"
        return f"ctc prefix beam + word LM{search}, {how}", m.group(10) or m.group(11)
    if name == "full":
        return "ctc greedy, full context", "full"
    if m.group(2):
        return f"ctc prefix beam + word LM{search}, full context", "full"
    if m.group(5):
        return "ctc greedy, streamed (`wenet-lite stream`)", m.group(5)
    if m.group(6):
        dtype = "int8" if m.group(8) else "fp32"
        return f"ctc greedy, {_EXPORTED[m.group(6)]}, {dtype}", m.group(7)
    how = "simulated streaming (chunk by chunk, cached)" if m.group(4) else "chunk-masked forward"
    return f"ctc greedy, {how}", m.group(3)


def read_summary(path: Path) -> Dict[str, str]:
    text = path.read_text()
    out = {k: v for k, v in _RATE.findall(text)}
    search = _SEARCH.search(text)
    if search:
        beam, blank, lm_file, lm = search.groups()
        out["search"] = f" {Path(lm_file).name} (`decode --lm`, {beam}{blank or ''}, LM {lm})"
    same = _IDENTICAL.search(text)
    if same:
        out["identical"] = f"{same.group(1)}/{same.group(2)}"
    return out


def collect(decode_root: Path, tests: Sequence[str]) -> Dict[str, Dict[str, Dict[str, str]]]:
    """{mode: {test: {"WER": .., "CER": .., ["identical": ..]}}}."""
    table: Dict[str, Dict[str, Dict[str, str]]] = {}
    for test in tests:
        for summary in sorted((decode_root / test).glob("*/summary.txt")):
            mode = summary.parent.name
            if _MODE.match(mode):
                table.setdefault(mode, {})[test] = read_summary(summary)
    return dict(sorted(table.items(), key=lambda kv: mode_key(kv[0])))


def results_lines(table: Dict[str, Dict[str, Dict[str, str]]], tests: Sequence[str]) -> List[str]:
    head = "| decoding mode | chunk | " + " | ".join(f"{t} WER | {t} CER" for t in tests) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(tests))]
    # A streamed row's summary has no search line: it was streamed with the LM decodes' settings.
    searches = [r.get("search") for per_test in table.values() for r in per_test.values()]
    lm_search = next((s for s in searches if s is not None), None)
    for mode, per_test in table.items():
        search = next((r["search"] for r in per_test.values() if "search" in r), None)
        if search is None and mode.endswith("_lm"):
            search = lm_search
        what, chunk = describe(mode) if search is None else describe(mode, search)
        cells = []
        for t in tests:
            r = per_test.get(t, {})
            cells += [r.get("WER", "-"), r.get("CER", "-")]
        lines.append(f"| {what} | {chunk} | " + " | ".join(cells) + " |")
    identical = [
        f"{describe(m)[1]}{' with the LM' if m.endswith('_lm') else ''}: {r['identical']} ({t})"
        for m, per_test in table.items()
        for t, r in per_test.items()
        if "identical" in r
    ]
    if identical:
        lines += ["", "Streamed transcripts identical to `decode --simulate-streaming`: "
                  + "; ".join(identical) + "."]  # fmt: skip
    return lines


def _words(text: str) -> List[str]:
    from wenet_lite.data.tokenizer import normalize_text

    return normalize_text(text).split()


def unseen_words(
    train_data: Sequence[Path], test_data: Path, hyp: Optional[Path], lm_text: Optional[Path] = None
) -> str:
    """One sentence on the test words never seen in training (and how many were decoded), and
    on those never in the LM text."""
    from wenet_lite.data.manifest import cut_text, load_cuts
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.decode.wer import align_tokens

    vocab = {w for part in train_data for c in load_cuts(part) for w in _words(cut_text(c))}
    refs = {c.id: normalize_text(cut_text(c)).split() for c in load_cuts(test_data)}
    total = sum(len(words) for words in refs.values())
    unseen = sum(w not in vocab for words in refs.values() for w in words)
    types = {w for words in refs.values() for w in words if w not in vocab}
    text = (
        f"{test_data.name}: {unseen} of {total} reference words ({100 * unseen / max(total, 1):.1f}"
        f" %, {len(types)} distinct) never occur in the {len(vocab)}-word training text"
    )
    if hyp is not None and hyp.is_file():
        hyps = {}
        for line in hyp.read_text(encoding="utf-8").splitlines():
            uid, _, words = line.partition(" ")
            hyps[uid] = words.split()
        right = sum(
            r == h
            for uid, words in refs.items()
            for r, h in align_tokens(words, hyps.get(uid, []))
            if r not in vocab
        )
        text += f"; full context spelled {right} of them right"
    if lm_text is not None:
        from wenet_lite.fileio import open_text

        with open_text(lm_text) as f:
            lm_vocab = {w for line in f for w in _words(line)}
        lm_unseen = sum(w not in lm_vocab for words in refs.values() for w in words)
        text += (
            f"; {lm_unseen} ({100 * lm_unseen / max(total, 1):.1f} %) never occur in the "
            f"{len(lm_vocab)}-word LM text ({lm_text.name})"
        )
    return text + "."


def training_lines(exp: Path) -> List[str]:
    log = exp / "train.log"
    if not log.is_file():
        return []
    text = log.read_text()
    steps = _STEP.findall(text)
    lines: List[str] = []
    if steps:
        from datetime import datetime

        def when(stamp: str) -> datetime:
            return datetime.strptime(stamp.split(",")[0], "%Y-%m-%d %H:%M:%S")

        starts = re.findall(r"^(\S+ \S+) .*trained tokenizer|^(\S+ \S+) .*train: \d+ utt", text,
                            re.M)  # fmt: skip
        first = next((a or b for a, b in starts), steps[0][0])
        minutes = (when(steps[-1][0]) - when(first)).total_seconds() / 60
        speeds = [float(s[3]) for s in steps]
        lines.append(
            f"Training: {steps[-1][1]} optimizer steps in {minutes:.1f} min wall "
            f"(from train.log), {sum(speeds) / len(speeds):.0f} audio-seconds per second on "
            f"average, last logged loss {steps[-1][2]}."
        )
    devs = _DEV.findall(text)
    if devs:
        epoch, utts, loss, wers = devs[-1]
        lines.append(f"Last validation (epoch {epoch}, {utts} dev utterances): loss {loss}, "
                     f"{wers}.")  # fmt: skip
    return lines


def model_line(model: Path) -> str:
    from wenet_lite.model_io import load_model

    m, tok, cfg = load_model(model)
    params = sum(p.numel() for p in m.parameters())
    enc = cfg.encoder
    return (
        f"Model `{model}`: {params / 1e6:.2f} M parameters, {enc.num_blocks} blocks, d_model "
        f"{enc.d_model}, {enc.num_heads} heads, FFN {enc.ffn_dim}, conv kernel {enc.conv_kernel}, "
        f"subsampling x{enc.subsampling_rate}, chunk mode {enc.chunk.mode}; tokenizer "
        f"{cfg.tokenizer.model_type} with {tok.vocab_size} pieces."
    )


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--exp", type=Path, required=True)
    p.add_argument("--model", type=Path, help="the decoded model file (for its size)")
    p.add_argument(
        "--train-data",
        type=Path,
        action="append",
        default=[],
        help="prepared train part(s), for the unseen-word rate (repeatable)",
    )
    p.add_argument("--test", type=Path, action="append", default=[], help="prepared test part")
    p.add_argument("--lm-text", type=Path, help="the word LM's training text, for its coverage")
    p.add_argument("--decode-root", type=Path, help="default EXP/decode")
    p.add_argument("--note", action="append", default=[], help="a line to add (repeatable)")
    p.add_argument("--out", type=Path, help="default EXP/RESULTS.md")
    args = p.parse_args(argv)
    if not args.test:
        p.error("give at least one --test part")
    tests = [t.name for t in args.test]
    root = args.decode_root or args.exp / "decode"
    table = collect(root, tests)
    if not table:
        raise SystemExit(f"error: no decode results under {root}/<test>/<mode>/summary.txt")
    header = "WER and CER in %; greedy CTC search unless the row says otherwise."
    lines = [f"# Results: {args.exp}", "", header, ""]
    lines += results_lines(table, tests)
    lines.append("")
    if args.train_data:
        for test in args.test:
            hyp = root / test.name / "full" / "hyp.txt"
            lines.append(unseen_words(args.train_data, test, hyp, args.lm_text))
        lines.append("")
    if args.model is not None:
        lines += [model_line(args.model), ""]
    lines += [line + "\n" for line in training_lines(args.exp)]
    lines += [f"{n}\n" for n in args.note]
    for png, what in (("training.png", "Training curves"), ("alignment.png", "CTC posteriors")):
        if (args.exp / png).is_file():
            lines += [f"{what}:", "", f"![{what}]({png})", ""]
    out = args.out or args.exp / "RESULTS.md"
    out.write_text("\n".join(lines).rstrip() + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
