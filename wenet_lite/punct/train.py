"""Train a punctuation and casing model from written text (`wenet-lite train-punct`).

Any cased, punctuated text serves, a document or a sentence a line. A share of the lines is
held out; the model learns from windows of the running text of the rest (most of them starting
or ending where a line does, so that a text's start and end teach its first capital and last
mark), and is measured on the held-out lines two ways, beside the baseline that capitalises the
first word and ends the text with a period: each line alone (a short recogniser segment that
holds one line), and :data:`RUN_LINES` lines at a time run together (a long segment, e.g. a
speech region of a recording, whose sentence ends inside it only the model can find). Scores:
F1 of each mark and of all marks, and case accuracy.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import random
import time
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from wenet_lite.fileio import naming_text_errors, open_text, write_text_atomic
from wenet_lite.punct.model import BOS, EOS, EOS_ID, UNK, PunctConfig, PunctModel
from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.punct.text import CASES, MARKS, Labelled, baseline, split_text

__all__ = [
    "PackedText",
    "PunctTrainOptions",
    "evaluate",
    "hide_words",
    "read_split_text",
    "read_training_text",
    "score_labels",
    "train_punct",
]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]


@dataclass(frozen=True)
class PunctTrainOptions:
    epochs: float = 4.0
    """passes over the training words"""
    batch_words: int = 4096
    """words per step (windows of ``window`` words)"""
    window: int = 64
    whole_lines: float = 0.4
    """share of the windows that hold one line alone, BOS to EOS (as a recogniser's segment
    holds one sentence or a paragraph); the rest run on across the lines' edges"""
    word_dropout: float = 0.3
    """share of the known words each step sees as unknown, so that the marks and capitals are
    also learnt from the words' spelling and their neighbours (what carries to text of another
    kind, whose words are often not the training text's)"""
    lr: float = 2e-3
    held_out: float = 0.05
    """share of the lines held out for the scores (at least one line)"""
    seed: int = 0
    max_steps: int = 0
    """0: as many as ``epochs`` gives"""
    precision: str = "fp32"
    """``bf16``: the model's products under bf16 autocast where the CPU multiplies bf16
    natively (AMX or AVX-512 bf16; elsewhere fp32, logged), the loss and the saved weights
    fp32"""


def read_training_text(paths: Sequence[PathLike]) -> List[List[Labelled]]:
    """The labelled words of each non-empty line of the files (UTF-8, gzipped if .gz); a file
    that is not UTF-8, or texts with no word or no mark and no capital, is refused naming it."""
    lines: List[List[Labelled]] = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such text file")
        before = len(lines)
        with naming_text_errors(path), open_text(path) as f:
            for line in f:
                words = split_text(line)
                if words:
                    lines.append(words)
        if len(lines) == before:
            raise ValueError(f"{path}: no words to learn from (empty, or marks alone)")
    if not any(w.mark or w.case for words in lines for w in words):
        names = ", ".join(str(p) for p in paths)
        raise ValueError(f"{names}: no punctuation and no capitals: nothing to learn from")
    return lines


def score_labels(
    gold: Sequence[Tuple[Sequence[int], Sequence[int]]],
    pred: Sequence[Tuple[Sequence[int], Sequence[int]]],
) -> Dict[str, float]:
    """F1 (%) of each mark and of all marks together, case accuracy (%) over the words, and F1
    of the capital case (most words are lower case, which the accuracy mostly counts)."""
    pairs_m = [(g, p) for (gm, _), (pm, _) in zip(gold, pred) for g, p in zip(gm, pm)]
    pairs_c = [(g, p) for (_, gc), (_, pc) in zip(gold, pred) for g, p in zip(gc, pc)]
    out: Dict[str, float] = {}

    def f1(tp: int, fp: int, fn: int) -> float:
        return 200.0 * tp / max(2 * tp + fp + fn, 1)

    for m in range(1, len(MARKS)):
        tp = sum(g == m and p == m for g, p in pairs_m)
        fp = sum(g != m and p == m for g, p in pairs_m)
        fn = sum(g == m and p != m for g, p in pairs_m)
        out[f"f1 {MARKS[m]}"] = round(f1(tp, fp, fn), 2)
    tp = sum(g == p and g != 0 for g, p in pairs_m)
    fp = sum(p != 0 and p != g for g, p in pairs_m)
    fn = sum(g != 0 and p != g for g, p in pairs_m)
    out["f1 all marks"] = round(f1(tp, fp, fn), 2)
    out["case accuracy"] = round(100.0 * sum(g == p for g, p in pairs_c) / max(len(pairs_c), 1), 2)
    cap = CASES.index("capital")  # the case a sentence's start needs: its F1 as the marks'
    tp = sum(g == cap and p == cap for g, p in pairs_c)
    fp = sum(g != cap and p == cap for g, p in pairs_c)
    fn = sum(g == cap and p != cap for g, p in pairs_c)
    out["f1 capital"] = round(f1(tp, fp, fn), 2)
    out["words"] = len(pairs_c)
    return out


class PackedText:
    """Training lines packed: each distinct word once in a table, and for every word of the
    text its word's index, mark and case in arrays (6 bytes a word, where a list of
    :class:`Labelled` costs about 60 bytes for each byte of text), each line's end, and the
    counts of mixed-case written forms."""

    def __init__(self) -> None:
        self.index: Dict[str, int] = {}
        self.table: List[str] = []
        self.word = array("i")
        self.mark = array("b")
        self.case = array("b")
        self.ends = array("q")
        """the word count after each line"""
        self._forms: Dict[str, Dict[str, int]] = {}

    def add(self, words: Sequence[Labelled]) -> None:
        """Append one line's words."""
        for w in words:
            i = self.index.get(w.word)
            if i is None:
                i = self.index[w.word] = len(self.table)
                self.table.append(w.word)
            self.word.append(i)
            self.mark.append(w.mark)
            self.case.append(w.case)
            if w.case == 3:
                forms = self._forms.setdefault(w.word, {})
                forms[w.written] = forms.get(w.written, 0) + 1
        self.ends.append(len(self.word))

    def __len__(self) -> int:
        return len(self.word)

    def most_common(self, n: int, at_least: int) -> List[str]:
        """The ``n`` most frequent words seen at least ``at_least`` times, most frequent first
        (ties in order of first appearance, as ``Counter.most_common``)."""
        counts = Counter(dict(zip(self.table, _counts(self.word, len(self.table)))))
        return [w for w, c in counts.most_common(n) if c >= at_least]

    def mixed_forms(self) -> Dict[str, str]:
        """As :func:`~wenet_lite.punct.text.mixed_forms` of the lines."""
        return {
            word: max(forms, key=lambda f: (forms[f], f)) for word, forms in self._forms.items()
        }


def _counts(ids: array, size: int) -> List[int]:
    import numpy as np

    return np.bincount(np.frombuffer(ids, dtype=np.int32), minlength=size).tolist()


def read_split_text(
    paths: Sequence[PathLike], share: float, seed: int
) -> Tuple[PackedText, List[List[Labelled]]]:
    """:func:`read_training_text`'s lines split as :func:`_split` splits them (the same lines
    held out), read twice instead of held in memory: the training lines packed, the held-out
    ones as labelled words."""
    total = 0
    for path in paths:  # first pass: how many lines have words (and every check)
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such text file")
        before = total
        with naming_text_errors(path), open_text(path) as f:
            total += sum(1 for line in f if split_text(line))
        if total == before:
            raise ValueError(f"{path}: no words to learn from (empty, or marks alone)")
    held_ids = _held(total, share, seed)
    packed, held = PackedText(), []
    any_label = False
    k = 0
    for path in paths:
        with naming_text_errors(path), open_text(path) as f:
            for line in f:
                words = split_text(line)
                if not words:
                    continue
                any_label = any_label or any(w.mark or w.case for w in words)
                if k in held_ids:
                    held.append(words)
                else:
                    packed.add(words)
                k += 1
    if not any_label:
        names = ", ".join(str(p) for p in paths)
        raise ValueError(f"{names}: no punctuation and no capitals: nothing to learn from")
    return packed, held


def _held(total: int, share: float, seed: int) -> set:
    """The indices of the held-out lines among ``total``."""
    order = list(range(total))
    random.Random(seed).shuffle(order)
    n = max(1, int(round(total * share))) if total > 1 else 0
    return set(order[:n])


def _split(lines: List[List[Labelled]], share: float, seed: int) -> Tuple[list, list]:
    held = _held(len(lines), share, seed)
    return ([ws for i, ws in enumerate(lines) if i not in held],
            [ws for i, ws in enumerate(lines) if i in held])  # fmt: skip


class _RunningText:
    """The training lines as one run of words, and where each line starts and ends."""

    def __init__(self, text: PackedText) -> None:
        self.text = text
        self.ends = text.ends

    def _at_line_edge(self, k: int) -> bool:
        if k == 0:
            return True
        i = bisect.bisect_left(self.ends, k)
        return i < len(self.ends) and self.ends[i] == k

    def windows(self, window: int, rng: random.Random, count: int, whole_lines: float = 0.0):
        """``count`` windows: (words, marks, cases) each, a window that starts where a line
        does opening with BOS and one that ends where a line does closing with EOS (their
        labels -100: not learnt). A share ``whole_lines`` hold one line alone (its first
        ``window`` words); of the rest, two in five start at a line's start (as a recogniser's
        segment starts a text), two in five end at a line's end, the rest anywhere, running
        on into the next line."""
        text, ends = self.text, self.ends
        size = len(text)
        out = []
        for _ in range(count):
            if whole_lines and rng.random() < whole_lines:
                k = rng.randrange(len(ends))
                start = ends[k - 1] if k else 0
                stop = min(ends[k], start + window)
                out.append(self._window(start, stop))
                continue
            kind = rng.random()
            if kind < 0.4:
                k = rng.randrange(len(ends))
                start = ends[k - 1] if k else 0
                stop = min(size, start + window)
            elif kind < 0.8:
                stop = ends[rng.randrange(len(ends))]
                start = max(0, stop - rng.randint(1, window))
            else:
                start = rng.randrange(max(1, size - 1))
                stop = min(size, start + window)
            out.append(self._window(start, stop))
        return out

    def _window(self, start: int, stop: int):
        text = self.text
        words = [text.table[i] for i in text.word[start:stop]]
        marks, cases = list(text.mark[start:stop]), list(text.case[start:stop])
        if self._at_line_edge(start):
            words, marks, cases = [BOS, *words], [-100, *marks], [-100, *cases]
        if self._at_line_edge(stop):
            words, marks, cases = [*words, EOS], [*marks, -100], [*cases, -100]
        return words, marks, cases


def hide_words(ids: torch.Tensor, share: float) -> torch.Tensor:
    """``ids`` with each known word (not PAD, UNK, BOS or EOS) made UNK with probability
    ``share`` (torch's random numbers)."""
    if share <= 0:
        return ids
    hidden = (torch.rand(ids.shape) < share) & (ids > EOS_ID)
    return ids.masked_fill(hidden, UNK)


RUN_LINES = 8
"""held-out lines run together for the running-text scores"""


def evaluate(punctuator: Punctuator, lines: List[List[Labelled]]) -> Dict[str, Dict[str, float]]:
    """The model's and the baseline's scores on lines each punctuated alone, and on runs of
    :data:`RUN_LINES` lines (module doc)."""
    runs = [
        [w for ws in lines[i : i + RUN_LINES] for w in ws] for i in range(0, len(lines), RUN_LINES)
    ]
    out: Dict[str, Dict[str, float]] = {}
    for suffix, texts_of in (("", lines), (", running text", runs)):
        gold = [([w.mark for w in ws], [w.case for w in ws]) for ws in texts_of]
        texts = [[w.word for w in ws] for ws in texts_of]
        pred = []
        for i in range(0, len(texts), 256):
            pred.extend(punctuator.labels(texts[i : i + 256]))
        out["model" + suffix] = score_labels(gold, pred)
        out["baseline" + suffix] = score_labels(gold, [baseline(t) for t in texts])
    return out


def _autocast(precision: str):
    """bf16 autocast on the CPU where it is native; fp32 otherwise (said in the log)."""
    import contextlib

    from wenet_lite.host.cpu import cpu_model, native_bf16

    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision {precision!r}: fp32 or bf16")
    if precision == "bf16" and native_bf16():
        log.info("training precision: bf16 (autocast on the CPU)")
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if precision == "bf16":
        log.warning("precision bf16: %s has no native bf16 (emulated it is several times "
                    "slower): training in fp32", cpu_model())  # fmt: skip
    return contextlib.nullcontext()


def train_punct(
    texts: Sequence[PathLike],
    out: PathLike,
    cfg: Optional[PunctConfig] = None,
    options: Optional[PunctTrainOptions] = None,
    progress: bool = True,
) -> Dict[str, object]:
    """Train on the text files, write ``out``/punct.pt and ``out``/metrics.json; return the
    metrics."""
    cfg = cfg or PunctConfig()
    options = options or PunctTrainOptions()
    packed, held = read_split_text(texts, options.held_out, options.seed)
    vocab = packed.most_common(cfg.vocab_size, 2)
    torch.manual_seed(options.seed)
    model = PunctModel(cfg)
    punctuator = Punctuator(model, vocab, packed.mixed_forms())
    text = _RunningText(packed)
    words_total = len(packed)
    train_lines = len(packed.ends)
    per_step = max(1, options.batch_words // options.window)
    epoch_steps = options.epochs * words_total / options.batch_words
    steps = options.max_steps or max(1, math.ceil(epoch_steps))
    log.info("punctuation model: %d training lines (%d words), %d held out; %d steps of %d "
             "windows", train_lines, words_total, len(held), steps, per_step)  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    rng = random.Random(options.seed)
    autocast = _autocast(options.precision)
    ce = torch.nn.CrossEntropyLoss(reduction="sum")
    from tqdm import tqdm

    bar = tqdm(range(steps), desc="train-punct", unit="step", disable=not progress)
    started = time.monotonic()
    model.train()
    for step in bar:
        batch = text.windows(options.window, rng, per_step, options.whole_lines)
        ids, grams, offsets, mask = punctuator.features.batch([b[0] for b in batch])
        ids = hide_words(ids, options.word_dropout)
        marks = torch.full_like(ids, -100)
        cases = torch.full_like(ids, -100)
        for i, (ws, m, c) in enumerate(batch):
            marks[i, : len(ws)] = torch.tensor(m)
            cases[i, : len(ws)] = torch.tensor(c)
        with autocast:
            mark_logits, case_logits = model(ids, grams, offsets, mask)
        mark_logits, case_logits = mark_logits.float(), case_logits.float()
        n = (marks >= 0).sum().clamp_min(1)
        loss = (ce(mark_logits[mask], marks[mask]) + ce(case_logits[mask], cases[mask])) / n
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        if not progress and (step % 200 == 0 or step == steps - 1):
            log.info("step %d/%d: loss %.4f", step + 1, steps, loss.item())
    model.eval()
    out_dir = Path(out)
    punctuator.save(out_dir)
    scores = evaluate(punctuator, held) if held else {}
    metrics: Dict[str, object] = {
        "texts": [str(t) for t in texts],
        "training lines": train_lines,
        "training words": words_total,
        "held-out lines": len(held),
        "steps": steps,
        "whole lines": options.whole_lines,
        "word dropout": options.word_dropout,
        "precision": "bf16" if isinstance(autocast, torch.autocast) else "fp32",
        "minutes": round((time.monotonic() - started) / 60, 2),
        "labels": {"marks": list(MARKS[1:]), "cases": list(CASES)},
        "right context (words)": cfg.right_context,
        **scores,
    }
    write_text_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics
