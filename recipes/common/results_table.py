#!/usr/bin/env python3
"""Collect an experiment's decoding results into RESULTS.md (WeNet README table format).

Usage:
    python recipes/common/results_table.py --exp exp/synthetic --model exp/synthetic/avg_5.pt \
        --train-data data/synthetic/train-clean-100 --test data/synthetic/test-clean \
        [--test data/other-part ...] [--note "text"] [--out exp/synthetic/RESULTS.md]

Reads EXP/decode/<test part>/<mode>/summary.json, written by `wenet-lite decode`, `stream
--ref` and `score`, where <mode> is ``full`` (``full_lm``: with the word LM), ``chunkC``
(chunk-masked forward), ``chunkC_sim`` (`decode --simulate-streaming`), ``streamC``
(`wenet-lite stream`; ``chunkC_sim_lm``/``streamC_lm``: both with the word LM; ``_beam``:
prefix beam search without the LM; ``_rescore``: attention rescoring, e.g. ``full_lm_rescore``) or
``tsC``/``sherpaC`` (+``_int8``: the exported models streamed by examples/run_exported.py and
examples/run_sherpa.py, scored by `wenet-lite score`), and writes one table row per mode and
chunk size with WER and CER per test set; a row's words come from the settings its
summary.json records. Also reports the unseen-word rate of each test set (reference words
that never occur in the training transcripts) and how many of those the full-context decode
got right, the training run (steps, wall time, speed, last dev WERs, from EXP/tensorboard),
the model size, and links to the pictures present. Prints the table too.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

Record = Dict[str, Any]
_MODE = re.compile(
    r"^(?:full|chunk(\d+)(_sim)?|stream(\d+)|(ts|sherpa)(\d+)(_int8)?)(_beam|_tgreedy|_tbeam)?(_lm)?"
    r"(_rescore)?(_hot|_unrelated)?$"
)
_BIAS = {None: 0, "_hot": 1, "_unrelated": 2}
_SEARCH = {None: 0, "_beam": 1, "_tgreedy": 3, "_tbeam": 4}
_EXPORTED = {
    "ts": "exported TorchScript (`examples/run_exported.py`)",
    "sherpa": "exported ONNX in sherpa-onnx (`examples/run_sherpa.py`)",
}
_PICTURES = (
    ("training.png", "Training curves"),
    ("alignment.png", "CTC posteriors"),
    ("attention.png", "Attention weights"),
    ("cross_attention.png", "Decoder cross-attention (attention rescoring)"),
)


def mode_key(name: str) -> Tuple[int, int, int]:
    """Sort order: full first (greedy, then with the LM), then by decreasing chunk: masked,
    simulated, streamed, then the same with the LM; then the exported models (TorchScript,
    sherpa-onnx; fp32, int8)."""
    m = _MODE.match(name)
    assert m is not None
    masked, sim, stream, engine, exported, int8, beam, lm, rescore, bias = m.groups()
    # ctc greedy, prefix beam, attention rescoring, transducer greedy, transducer beam
    search = 2 if rescore else _SEARCH[beam]
    if engine:
        return (2, 2 * (engine == "sherpa") + bool(int8) + 4 * search, -int(exported))
    if not (masked or stream):  # each search, then the same with the LM;
        return (0, 0, 3 * (search + 5 * bool(lm)) + _BIAS[bias])  # each plain, then biased
    kind = 2 if stream else (1 if sim else 0)
    return (1, -int(masked or stream), kind + 3 * (search + 5 * bool(lm)))


def describe_search(search: Record) -> str:
    """The row's words for a recorded ``SearchOptions``."""
    if search["mode"] == "transducer_greedy":
        return f"transducer greedy ({search.get('max_symbols', 4)} symbol(s) a frame)"
    if search["mode"] == "transducer_beam":
        return f"transducer modified beam {search['beam_size']}"
    if search["mode"] == "greedy":
        text = "ctc greedy"
    else:
        text = f"ctc prefix beam {search['beam_size']}"
        if search.get("token_min_logp") is not None:
            text += f" (token min log-prob {search['token_min_logp']})"
    if search.get("blank_penalty"):
        text += f", blank penalty {search['blank_penalty']}"
    if search.get("lm"):
        text += (
            f" + word LM {Path(search['lm']).name} (weight {search['lm_weight']}, word bonus "
            f"{search['word_bonus']}, oov penalty {search['oov_penalty']})"
        )
    if search.get("hotwords"):
        text += (
            f" + hotwords {Path(search['hotwords']).name} ({search['hotwords_score']} per token)"
        )
    if search["mode"] == "attention_rescoring":
        text += (
            f" + attention rescoring of the {search['nbest']}-best (ctc weight "
            f"{search['ctc_weight']}, reverse weight {search['reverse_weight']})"
        )
    return text


def describe(mode: str, record: Record) -> Tuple[str, str]:
    """(decoding mode, chunk column) of a mode dir and its summary.json."""
    m = _MODE.match(mode)
    assert m is not None
    masked, sim, stream, engine, exported, int8, _, _, rescore, _ = m.groups()
    if engine:
        dtype = "int8" if int8 else "fp32"
        search = "ctc prefix beam 10 + attention rescoring" if rescore else "ctc greedy"
        return f"{search}, {_EXPORTED[engine]}, {dtype}", exported
    settings = record.get("settings", {})
    search = describe_search(settings["search"]) if "search" in settings else "?"
    if stream:
        return f"{search}, streamed (`wenet-lite stream`)", stream
    if not masked:
        return f"{search}, full context", "full"
    how = "simulated streaming (chunk by chunk, cached)" if sim else "chunk-masked forward"
    return f"{search}, {how}", masked


def collect(decode_root: Path, tests: Sequence[str]) -> Dict[str, Dict[str, Record]]:
    """{mode: {test: summary.json record}}, modes in table order."""
    table: Dict[str, Dict[str, Record]] = {}
    for test in tests:
        for summary in sorted((decode_root / test).glob("*/summary.json")):
            mode = summary.parent.name
            if _MODE.match(mode):
                table.setdefault(mode, {})[test] = json.loads(summary.read_text())
    return dict(sorted(table.items(), key=lambda kv: mode_key(kv[0])))


def results_lines(table: Dict[str, Dict[str, Record]], tests: Sequence[str]) -> List[str]:
    head = "| decoding mode | chunk | " + " | ".join(f"{t} WER | {t} CER" for t in tests) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(tests))]
    for mode, per_test in table.items():
        what, chunk = describe(mode, next(iter(per_test.values())))
        cells = []
        for t in tests:
            r = per_test.get(t)
            cells += (
                [f"{r['wer']['percent']:.2f}", f"{r['cer']['percent']:.2f}"] if r else ["-", "-"]
            )
        lines.append(f"| {what} | {chunk} | " + " | ".join(cells) + " |")
    identical = [
        f"{describe(m, r)[1]}{' with the LM' if '_lm' in m else ''}"
        f"{' rescored' if m.endswith('_rescore') else ''}: "
        f"{r['identical']['same']}/{r['identical']['compared']} ({t})"
        for m, per_test in table.items()
        for t, r in per_test.items()
        if "identical" in r
    ]
    if identical:
        lines += ["", "Streamed transcripts identical to `decode --simulate-streaming`: "
                  + "; ".join(identical) + "."]  # fmt: skip
    return lines


def hotword_lines(
    table: Dict[str, Dict[str, Record]], decode_root: Path, test: Path, words_file: Path
) -> List[str]:
    """Recall of the listed words (reference occurrences decoded right) in each full-context
    row, and the decode time of each biased row against its plain one."""
    from wenet_lite.data.manifest import cut_text, load_cuts
    from wenet_lite.evaluation.score import read_hyps
    from wenet_lite.evaluation.wer import align_tokens

    listed = set(words_file.read_text(encoding="utf-8").split())
    refs = {c.id: _words(cut_text(c)) for c in load_cuts(test)}
    rows = []
    for mode in ("full", "full_beam", "full_beam_hot", "full_beam_unrelated", "full_lm",
                 "full_lm_hot", "full_lm_unrelated"):  # fmt: skip
        record = table.get(mode, {}).get(test.name)
        if record is None:
            continue
        hyps = {
            u: t.split() for u, t in read_hyps(decode_root / test.name / mode / "hyp.txt").items()
        }
        pairs = [(r, h) for u, ref in refs.items() for r, h in align_tokens(ref, hyps.get(u, []))]
        hits = [r == h for r, h in pairs if r in listed]
        rows.append(
            f"| {describe(mode, record)[0]} | {sum(hits)}/{len(hits)} "
            f"({100 * sum(hits) / max(len(hits), 1):.1f} %) | {record['wer']['percent']:.2f} | "
            f"{record['wall_seconds']:.1f} |"
        )
    if not rows:
        return []
    return [
        f"Hotwords ({test.name}; the list {words_file.name}: {len(listed)} words of the test "
        "transcripts that never occur in the training text; `_unrelated`: as many words that "
        "do not occur in the test set):",
        "",
        "| decoding mode | listed words decoded right | WER | decode wall s |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def _words(text: str) -> List[str]:
    from wenet_lite.data.tokenizer import normalize_text

    return normalize_text(text).split()


def unseen_words(
    train_data: Sequence[Path], test_data: Path, hyp: Optional[Path], lm_text: Optional[Path] = None
) -> str:
    """One sentence on the test words never seen in training (and how many were decoded), and
    on those never in the LM text."""
    from wenet_lite.data.manifest import cut_text, load_cuts
    from wenet_lite.evaluation.score import read_hyps
    from wenet_lite.evaluation.wer import align_tokens

    vocab = {w for part in train_data for c in load_cuts(part) for w in _words(cut_text(c))}
    refs = {c.id: _words(cut_text(c)) for c in load_cuts(test_data)}
    total = sum(len(words) for words in refs.values())
    unseen = sum(w not in vocab for words in refs.values() for w in words)
    types = {w for words in refs.values() for w in words if w not in vocab}
    text = (
        f"{test_data.name}: {unseen} of {total} reference words ({100 * unseen / max(total, 1):.1f}"
        f" %, {len(types)} distinct) never occur in the {len(vocab)}-word training text"
    )
    if hyp is not None and hyp.is_file():
        hyps = {uid: words.split() for uid, words in read_hyps(hyp).items()}
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
    """The training run, from the scalars it wrote to EXP/tensorboard."""
    if not (exp / "tensorboard").is_dir():
        return []
    from wenet_lite.train.events import read_scalars

    scalars = read_scalars(exp / "tensorboard")
    lines: List[str] = []
    loss, speed = scalars.get("train/loss"), scalars.get("train/audio_seconds_per_second")
    if loss and speed:
        minutes = (loss[-1].wall_time - loss[0].wall_time) / 60
        mean_speed = sum(s.value for s in speed) / len(speed)
        lines.append(
            f"Training: {loss[-1].step} optimizer steps, {minutes:.1f} min wall from the first "
            f"logged step to the last, {mean_speed:.0f} audio-seconds per second on average, "
            f"last logged loss {loss[-1].value:.4f}."
        )
    log = exp / "train.log"
    if log.is_file():  # the trainer logs what trained: "training precision: bf16 (...)"
        said = [line.split("training precision: ", 1)[1] for line in log.read_text().splitlines()
                if "training precision: " in line]  # fmt: skip
        if said:
            lines.append(f"Precision: {said[-1]} (`train.precision`; `wenet-lite --version` "
                         "says what the CPU offers).")  # fmt: skip
    dev = scalars.get("dev/loss")
    if dev:
        wers = ", ".join(
            f"WER[{tag[len('dev/wer_') :]}] {points[-1].value:.2f}%"
            for tag, points in sorted(scalars.items())
            if tag.startswith("dev/wer_")
        )
        lines.append(f"Last validation (step {dev[-1].step}): loss {dev[-1].value:.4f}, {wers}.")
    return lines


def punct_lines(model: Path) -> List[str]:
    """The punctuation model's held-out scores beside the baseline's (its metrics.json), and
    its scores on texts of other kinds (``score_*.json`` beside it, `punctuate --score`'s)."""
    m = json.loads((model / "metrics.json").read_text())
    if "model" not in m:
        return []
    keys = [k for k in m["model"] if k != "words"]
    lines = [
        f"Punctuation and casing (`wenet-lite train-punct`, `{model}`): {m['training words']} "
        f"words of {', '.join(Path(t).name for t in m['texts'])} in {m['minutes']} min; scored "
        f"on {m['held-out lines']} held-out lines ({m['model']['words']} words), each alone and "
        "8 at a time run together (the sentence ends inside a longer segment):",
        "",
        "| | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    rule = "baseline: first word capitalised, a period at the end"
    scored = [("held-out", m)]  # and texts of other kinds: `punctuate --score T --json`
    for path in sorted(model.glob("score_*.json")):
        other = json.loads(path.read_text())
        texts = ", ".join(Path(t).name for t in other.get("texts", [])) or path.stem[6:]
        scored.append((f"{texts} (never trained on)", other))
    for where, scores_of in scored:
        for suffix, how in (("", "lines alone"), (", running text", "8 lines run together")):
            for who, name in (("model", "the model"), ("baseline", rule)):
                if who + suffix in scores_of:
                    scores = scores_of[who + suffix]
                    lines.append(f"| {name}, {where} {how} | "
                                 + " | ".join(f"{scores[k]:.2f}" for k in keys) + " |")  # fmt: skip
    return lines + [""]


def model_line(model: Path) -> str:
    from wenet_lite.files.model_file import load_model

    m, tok, cfg = load_model(model)
    params = sum(p.numel() for p in m.parameters())
    enc, dec = cfg.encoder, cfg.decoder
    decoder = ""
    if m.decoder is not None:
        size = sum(p.numel() for p in m.decoder.parameters())
        trained = "detached from the encoder" if dec.detach_encoder else "joint training"
        decoder = (
            f"; attention decoder {dec.num_blocks} + {dec.r2l_num_blocks} blocks, FFN "
            f"{dec.ffn_dim} ({size / 1e6:.2f} M parameters, {trained}, ctc weight "
            f"{cfg.model.ctc_weight}, reverse weight {cfg.model.reverse_weight})"
        )
    return (
        f"Model `{model}`: {params / 1e6:.2f} M parameters, {enc.num_blocks} blocks, d_model "
        f"{enc.d_model}, {enc.num_heads} heads, FFN {enc.ffn_dim}, conv kernel {enc.conv_kernel}, "
        f"subsampling x{enc.subsampling_rate}, chunk mode {enc.chunk.mode}{decoder}; tokenizer "
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
    p.add_argument("--hotwords-list", type=Path, help="the hotword list, for its recall")
    p.add_argument("--decode-root", type=Path, help="default EXP/decode")
    p.add_argument("--punct", type=Path, help="a punctuation model dir, for its held-out scores")
    p.add_argument("--note", action="append", default=[], help="a line to add (repeatable)")
    p.add_argument("--out", type=Path, help="default EXP/RESULTS.md")
    args = p.parse_args(argv)
    if not args.test:
        p.error("give at least one --test part")
    tests = [t.name for t in args.test]
    root = args.decode_root or args.exp / "decode"
    table = collect(root, tests)
    if not table:
        raise SystemExit(f"error: no decode results under {root}/<test>/<mode>/summary.json")
    header = "WER and CER in %; the search of each row is named in it."
    lines = [f"# Results: {args.exp}", "", header, ""]
    lines += results_lines(table, tests)
    lines.append("")
    if args.train_data:
        for test in args.test:
            hyp = root / test.name / "full" / "hyp.txt"
            lines.append(unseen_words(args.train_data, test, hyp, args.lm_text))
        lines.append("")
    if args.hotwords_list is not None:
        for test in args.test:
            lines += hotword_lines(table, root, test, args.hotwords_list)
    if args.punct is not None and (args.punct / "metrics.json").is_file():
        lines += punct_lines(args.punct)
    if args.model is not None:
        lines += [model_line(args.model), ""]
    lines += [line + "\n" for line in training_lines(args.exp)]
    lines += [f"{n}\n" for n in args.note]
    for png, what in _PICTURES:
        if (args.exp / png).is_file():
            lines += [f"{what}:", "", f"![{what}]({png})", ""]
    out = args.out or args.exp / "RESULTS.md"
    out.write_text("\n".join(lines).rstrip() + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
