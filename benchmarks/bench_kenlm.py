#!/usr/bin/env python3
"""The word LM at LibriSpeech's scale: ARPA files of 2 M n-grams (a 3-gram, the size of
openslr.org/11's pruned 3-gram) and 20 M n-grams (a 4-gram) generated here, read by KenLM and
by the Python reader, and KenLM's binary file of each built once and reused; for each, the
time to load, the process's peak memory, and the CTC prefix beam's speed with it fused, beside
the beam with the recipe's own small LM (`wenet-lite train-lm`) and with none.

    python benchmarks/bench_kenlm.py [--exp exp/synthetic/avg_5.pt] \\
        [--test data/synthetic/test-clean] [--train data/synthetic/train-clean-100] \\
        [--sizes 2e6 2e7] [--utts 40] \\
        [--work /tmp/bench_kenlm] [--build-binary PATH/build_binary]

Each row runs in a fresh process (its peak memory is its own). The generated n-grams are
words of the training transcripts first, so the beam's hypotheses meet real entries, then
made-up words up to the vocabulary size; every n-gram's history and its suffix are themselves
n-grams of the file (KenLM and the Python reader both require a proper back-off model).
`build_binary` is KenLM's own tool (`compile_query_only.sh` in KenLM's source builds it);
without it the binary rows are left out. One thread, as `transcribe` decodes.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

_STEP = 1_000_003  # a prime: j * _STEP mod V differs for every j < V when V is not its multiple


def _successor(words: np.ndarray, j: np.ndarray, vocab: int) -> np.ndarray:
    """The j-th word that may follow each of ``words`` (distinct for distinct j)."""
    return ((words.astype(np.int64) * 7919 + (j.astype(np.int64) + 1) * _STEP) % vocab).astype(
        np.int32
    )


def _mix(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    return ((a.astype(np.int64) * 31 + b.astype(np.int64) * 17) % k).astype(np.int32)


def _grams(total: int, order: int, vocab: int, rng: np.random.Generator) -> List[np.ndarray]:
    """Word-id rows per order (1-grams excluded): every row's history and suffix are rows of the
    order below (the bigrams' successors ``_successor(w, j)`` for j < fan, a trigram's last word
    one of its suffix bigram's first words' successors picked by the pair)."""
    fan, fan3, fan4 = 8, 4, 2
    words = np.arange(vocab, dtype=np.int32)
    w1 = np.repeat(words, fan)
    bigrams = np.stack([w1, _successor(w1, np.tile(np.arange(fan), vocab), vocab)], 1)
    left = total - vocab - len(bigrams)
    if order == 2:
        return [bigrams]
    contexts = bigrams
    if order == 3:  # the top order's histories: a random share of the bigrams
        pick = min(len(bigrams), max(1, left // fan3))
        contexts = bigrams[np.sort(rng.choice(len(bigrams), pick, replace=False))]
    trigrams = _extend(contexts, fan3, fan, vocab)
    if order == 3:
        return [bigrams, trigrams]
    left -= len(trigrams)
    pick = min(len(trigrams), max(1, left // fan4))
    contexts = trigrams[np.sort(rng.choice(len(trigrams), pick, replace=False))]
    return [bigrams, trigrams, _extend(contexts, fan4, fan, vocab)]


def _extend(contexts: np.ndarray, k: int, fan: int, vocab: int) -> np.ndarray:
    """Each history row followed by ``k`` words: those the suffix of the row picks (so that
    the new row's suffix is a row of the order below)."""
    first = _mix(contexts[:, -2], contexts[:, -1], fan) if contexts.shape[1] > 1 else 0
    rows = np.repeat(contexts, k, 0)
    j = (np.repeat(first, k) + np.tile(np.arange(k), len(contexts))) % fan
    return np.concatenate([rows, _successor(rows[:, -1], j, vocab)[:, None]], 1)


def write_arpa(path: Path, total: int, order: int, known: Sequence[str], seed: int = 0) -> int:
    """An ARPA back-off LM of about ``total`` n-grams; returns how many it holds."""
    rng = np.random.default_rng(seed)
    vocab = max(len(known) + 1, total // (20 if order == 3 else 100))
    names = np.array(list(known) + [f"ZZ{i}" for i in range(vocab - len(known))], dtype=object)
    orders = _grams(total, order, vocab, rng)
    starts = np.arange(min(1000, vocab))
    ends = np.arange(min(1000, vocab))
    counts = [vocab + 3] + [len(g) for g in orders]
    counts[1] += len(starts) + len(ends)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\\data\\\n" + "".join(f"ngram {n + 1}={c}\n" for n, c in enumerate(counts)))
        f.write("\n\\1-grams:\n-99\t<s>\t-0.5\n-2.0\t</s>\n-6.0\t<unk>\t0\n")
        _lines(f, rng, [names[np.arange(vocab)]], True)
        f.write("\n\\2-grams:\n")
        f.write("".join(f"-1.0\t<s> {names[i]}\t-0.3\n" for i in starts))
        f.write("".join(f"-1.5\t{names[i]} </s>\t-0.3\n" for i in ends))
        for n, rows in enumerate(orders, 2):
            if n > 2:
                f.write(f"\n\\{n}-grams:\n")
            _lines(f, rng, [names[rows[:, c]] for c in range(n)], n < order)
        f.write("\n\\end\\\n")
    return sum(counts)


def _lines(f, rng: np.random.Generator, columns: List[np.ndarray], backoff: bool) -> None:
    block = 1_000_000
    for lo in range(0, len(columns[0]), block):
        cols = [c[lo : lo + block] for c in columns]
        probs = rng.uniform(-6.0, -0.5, len(cols[0]))
        text = [" ".join(ws) for ws in zip(*cols)]
        if backoff:
            backs = rng.uniform(-1.0, 0.0, len(text))
            f.write("".join(f"{p:.4f}\t{t}\t{b:.4f}\n" for p, t, b in zip(probs, text, backs)))
        else:
            f.write("".join(f"{p:.4f}\t{t}\n" for p, t in zip(probs, text)))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    """Resident memory now (Linux), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return _peak_mb()


def child(args: argparse.Namespace) -> Dict[str, object]:
    """One row: load the model, then the LM (timed), then decode ``--utts`` test files."""
    import torch

    from wenet_lite.data.manifest import cut_samples, load_cuts
    from wenet_lite.recognizer import open_offline
    from wenet_lite.search.lm import LMScorer, load_lm
    from wenet_lite.search.options import SearchModels, SearchOptions

    torch.set_num_threads(1)
    rec = open_offline(args.exp, search=SearchOptions(mode="prefix_beam", beam_size=args.beam))
    cuts = list(load_cuts(Path(args.test) / "cuts.jsonl.gz"))[: args.utts]
    audio = [cut_samples(c, 16000) for c in cuts]
    seconds = sum(len(a) for a in audio) / 16000
    base_mb = _rss_mb()
    row: Dict[str, object] = {"audio_s": seconds}
    if args.lm:
        t = time.perf_counter()
        try:
            lm = load_lm(args.lm, args.backend)
        except ValueError as e:
            return {"refused": str(e)}
        row["load_s"] = time.perf_counter() - t
        pieces = rec.tokenizer.pieces()
        scorer = LMScorer(lm, pieces)  # the toolkit's default weight, bonus and OOV penalty
        rec.models = SearchModels(scorer, None)
    row["lm_mb"] = _rss_mb() - base_mb
    rec.recognize(audio[0], 16000)  # warm
    t = time.perf_counter()
    for a in audio:
        rec.recognize(a, 16000)
    row["decode_s"] = time.perf_counter() - t
    row["peak_mb"] = _peak_mb()
    return row


def _run_child(args: argparse.Namespace, lm: Optional[Path], backend: str) -> Dict[str, object]:
    cmd = [sys.executable, __file__, "--child", "--exp", args.exp, "--test", args.test,
           "--utts", str(args.utts), "--beam", str(args.beam), "--backend", backend]  # fmt: skip
    if lm is not None:
        cmd += ["--lm", str(lm)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _build_binary(tool: str, arpa: Path) -> Optional[Path]:
    out = arpa.with_suffix(".bin")
    if not out.exists():
        t = time.perf_counter()
        subprocess.run([tool, "-S", "50%", str(arpa), str(out) + ".tmp"], check=True,
                       capture_output=True)  # fmt: skip
        Path(str(out) + ".tmp").rename(out)
        print(f"built {out} in {time.perf_counter() - t:.1f} s", flush=True)
    return out


def _row(name: str, backend: str, grams: str, r: Dict[str, object]) -> str:
    if "refused" in r:
        return f"| {name} | {backend} | {grams} | refused: {r['refused']} | | | |"
    rtf = float(r["decode_s"]) / float(r["audio_s"])  # type: ignore[arg-type]
    load = f"{r['load_s']:.2f}" if "load_s" in r else "-"
    return (f"| {name} | {backend} | {grams} | {load} | {r['lm_mb']:.0f} | {r['peak_mb']:.0f} | "
            f"{rtf:.3f} |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--exp", default="exp/synthetic/avg_5.pt", help="a model file (default: the recipe's)"
    )
    p.add_argument("--test", default="data/synthetic/test-clean", help="a prepared test set")
    p.add_argument(
        "--train",
        default="data/synthetic/train-clean-100",
        help="prepared training set: the small LM and the generated files' first words",
    )
    p.add_argument("--sizes", type=float, nargs="+", default=[2e6, 2e7], help="n-grams per file")
    p.add_argument("--utts", type=int, default=40, help="test files decoded per row")
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--work", default="/tmp/bench_kenlm", help="where the files are kept")
    p.add_argument("--build-binary", help="KenLM's build_binary, for the binary rows")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--lm", help=argparse.SUPPRESS)
    p.add_argument("--backend", default="auto", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    from wenet_lite.host.cpu import cpu_summary
    from wenet_lite.search.lm import WordLM

    print(cpu_summary().splitlines()[0], flush=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    small = work / "small.json"
    if not small.exists():
        subprocess.run([sys.executable, "-m", "wenet_lite", "train-lm", "--data", args.train,
                        "--out", str(small)], check=True)  # fmt: skip
    small_lm = WordLM.load(small)
    known = sorted(w for w in small_lm.words if not w.startswith("<"))
    rows = ["| LM | backend | n-grams | load s | LM MB | peak MB | beam RTF |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    rows.append(_row("none", "-", "-", _run_child(args, None, "auto")))
    small_grams = len(small_lm.unigrams) + sum(map(len, small_lm.ngrams.values()))
    rows.append(
        _row("train-lm (JSON)", "python", f"{small_grams:,}", _run_child(args, small, "python"))
    )
    print("\n".join(rows), flush=True)
    for size in args.sizes:
        order = 3 if size < 1e7 else 4
        arpa = work / f"{order}gram_{size:.0e}.arpa"
        if not arpa.exists():
            t = time.perf_counter()
            grams = write_arpa(arpa, int(size), order, known)
            print(f"wrote {arpa} ({grams:,} n-grams) in {time.perf_counter() - t:.0f} s",
                  flush=True)  # fmt: skip
        from wenet_lite.search.lm import arpa_ngram_count

        name, grams = f"{order}-gram ARPA", f"{arpa_ngram_count(arpa):,}"
        for backend in ("kenlm", "python"):
            rows.append(_row(name, backend, grams, _run_child(args, arpa, backend)))
            print(rows[-1], flush=True)
        if args.build_binary:
            binary = _build_binary(args.build_binary, arpa)
            rows.append(_row(f"{order}-gram binary", "kenlm", grams,
                             _run_child(args, binary, "kenlm")))  # fmt: skip
            print(rows[-1], flush=True)
    print("\n".join(rows))
    print(
        "\nbeam RTF: the whole decode's seconds per audio second (encoder included), beam "
        f"{args.beam}, {args.utts} files of {args.test}; LM MB: resident memory the loaded LM added"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
