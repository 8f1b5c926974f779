"""A trained punctuation model in use: words in, cased and punctuated words out.

A model directory (what `wenet-lite train-punct` writes) holds ``punct.pt``: the weights, the
config, the word list and the mixed-case forms, loaded with ``weights_only=True``; and
``metrics.json``: what the held-out text measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import torch

from wenet_lite.fileio import atomic_open
from wenet_lite.punct.model import BOS, EOS, PunctConfig, PunctModel, WordFeatures
from wenet_lite.punct.text import apply_labels, plain_word
from wenet_lite.weights import weights_problem

__all__ = ["KIND", "MODEL_FILE", "PunctError", "PunctSource", "PunctStream", "Punctuator",
           "load_punctuator"]  # fmt: skip

KIND = "wenet-lite punctuation"
MODEL_FILE = "punct.pt"


class PunctError(ValueError):
    """A punctuation model directory that cannot be used (names it)."""


class Punctuator:
    """Labels words with their marks and cases (``words`` or ``text``), whole texts at once
    or (:meth:`stream`) as words arrive."""

    def __init__(self, model: PunctModel, vocab: Sequence[str], mixed: Dict[str, str]) -> None:
        self.model = model.eval()
        self.features = WordFeatures(vocab, model.cfg.buckets)
        self.mixed = dict(mixed)

    @property
    def right_context(self) -> int:
        return self.model.cfg.right_context

    @property
    def left_context(self) -> int:
        return self.model.cfg.left_context

    @classmethod
    def load(cls, directory: Union[str, Path]) -> Punctuator:
        d = Path(directory)
        path = d / MODEL_FILE
        if not d.is_dir():
            raise PunctError(f"{d}: no such punctuation model directory")
        if not path.is_file():
            kind = " (it holds model.pt: an ASR model, not a punctuation model)" if (
                d / "model.pt").is_file() else ""  # fmt: skip
            raise PunctError(
                f"{d}: not a punctuation model directory: no {MODEL_FILE}{kind}; "
                "`wenet-lite train-punct` writes one"
            )
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a truncated or foreign file (torch's text is long): one line
            raise PunctError(
                f"{path}: not a readable punctuation model ({_first_line(e)})"
            ) from None
        if not isinstance(blob, dict) or blob.get("kind") != KIND:
            raise PunctError(f"{path}: not a punctuation model (written by something else)")
        return cls._checked(blob, path)

    @classmethod
    def _checked(cls, blob: dict, path: Path) -> Punctuator:
        """The model of a read file, checked before memory is given to it: its config (sizes
        within bounds), its weights against a skeleton on the meta device, its word list
        within the word embedding, its labels of a few words finite."""
        try:
            cfg = PunctConfig(**blob["config"])
            vocab, mixed, state = list(blob["vocab"]), dict(blob["mixed"]), blob["state_dict"]
        except (KeyError, TypeError, ValueError) as e:  # another version's layout, bad sizes
            why = _first_line(e)
            raise PunctError(f"{path}: a punctuation model of another layout ({why})") from None
        if len(vocab) > cfg.vocab_size or not all(isinstance(w, str) for w in vocab):
            raise PunctError(f"{path}: its word list ({len(vocab)} entries) is not words that fit "
                             f"its word embedding ({cfg.vocab_size})")  # fmt: skip
        with torch.device("meta"):
            skeleton = PunctModel(cfg)
        problem = weights_problem(skeleton.state_dict(), state) if isinstance(state, dict) else (
            "its state_dict is not names -> tensors")  # fmt: skip
        if problem is not None:
            raise PunctError(f"{path}: {problem}")
        model = PunctModel(cfg)
        model.load_state_dict(state)
        punctuator = cls(model, vocab, mixed)
        marks, cases = punctuator.model(*punctuator.features.batch([["a", "word", "."]]))[:2]
        if not bool(torch.isfinite(marks).all() and torch.isfinite(cases).all()):
            raise PunctError(f"{path}: its labels of three words are NaN or infinite (weights "
                             "too large for float32 arithmetic?)")  # fmt: skip
        return punctuator

    def save(self, directory: Union[str, Path]) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        blob = {
            "kind": KIND,
            "config": self.model.cfg.to_dict(),
            "vocab": list(self.features.vocab),
            "mixed": dict(self.mixed),
            "state_dict": self.model.state_dict(),
        }
        with atomic_open(d / MODEL_FILE, "wb") as f:
            torch.save(blob, f)
        return d / MODEL_FILE

    @torch.inference_mode()
    def labels(
        self, texts: Sequence[Sequence[str]], starts: bool = True, ends: bool = True
    ) -> List[tuple]:
        """(marks, cases) of each text's plain words, the texts in one padded batch;
        ``starts``/``ends``: whether the texts start and end there (else they are cut from a
        longer one)."""
        if not texts or not any(texts):
            return [([], []) for _ in texts]
        head, tail = [BOS] if starts else [], [EOS] if ends else []
        ids, grams, offsets, mask = self.features.batch([head + list(t) + tail for t in texts])
        marks, cases = self.model(ids, grams, offsets, mask)
        marks, cases = marks.argmax(-1), cases.argmax(-1)
        a = len(head)
        return [(marks[b, a : a + len(t)].tolist(), cases[b, a : a + len(t)].tolist())
                for b, t in enumerate(texts)]  # fmt: skip

    def words(self, words: Sequence[str]) -> List[str]:
        """A recogniser's words (any case, no marks) written with case and marks, one for one
        (a word and its mark travel together, so each keeps its time)."""
        return self._written(words, [], True)

    def _written(self, words: Sequence[str], before: Sequence[str], starts: bool) -> List[str]:
        """``words`` labelled after the plain words ``before`` (their left context), as the
        end of a text; words with nothing plain in them stay as they are."""
        plain = [plain_word(w) for w in words]
        keep = [i for i, w in enumerate(plain) if w]
        kept = [plain[i] for i in keep]
        marks, cases = self.labels([list(before) + kept], starts=starts)[0]
        a = len(before)
        written = apply_labels(kept, marks[a:], cases[a:], self.mixed)
        out = list(words)
        for i, text in zip(keep, written):
            out[i] = text
        return out

    def text(self, text: str) -> str:
        """A line of words, cased and punctuated."""
        return " ".join(self.words(text.split()))

    def stream(self) -> PunctStream:
        return PunctStream(self)


class PunctStream:
    """A stream's punctuation. Segment by segment (:meth:`words`, as a stream's segments
    close): each labelled with the stream's earlier words as its left context, so a segment
    that goes on with a sentence is written as its continuation. Or word by word
    (:meth:`accept`): each word out once ``right_context`` words follow it (or at
    :meth:`finish`), labelled as the whole text labels it."""

    def __init__(self, punctuator: Punctuator) -> None:
        self.p = punctuator
        self._words: List[str] = []
        self._done = 0
        self._before: List[str] = []  # the last plain words of the closed segments
        self._started = False  # a closed segment held words
        self._sentence_ended = True  # the last segment's last word closed a sentence

    def words(self, words: Sequence[str]) -> List[str]:
        """A closed segment's words written with case and marks, one for one: labelled after
        up to ``left_context`` plain words of the earlier segments, the segment's end as a
        text's end (a pause); its first word capitalised where the last segment ended a
        sentence."""
        out = self.p._written(words, self._before, starts=not self._started)
        plain = [plain_word(w) for w in words]
        for k, w in enumerate(plain):
            if w:
                if self._sentence_ended and out[k][:1].islower():
                    out[k] = out[k][:1].upper() + out[k][1:]
                break
        kept = self._before + [w for w in plain if w]
        self._before = kept[max(0, len(kept) - self.p.left_context) :]
        if any(plain):
            self._started = True
            self._sentence_ended = out[max(k for k, w in enumerate(plain) if w)][-1:] in ".?!"
        return out

    def accept(self, words: Sequence[str]) -> List[str]:
        """Take more words; return the words that are now labelled for good."""
        self._words.extend(plain_word(w) or w for w in words)
        return self._emit(len(self._words) - self.p.right_context, False)

    def finish(self) -> List[str]:
        """The words still held, labelled as the end of the text."""
        return self._emit(len(self._words), True)

    def _emit(self, upto: int, end: bool) -> List[str]:
        if upto <= self._done:
            return []
        first = max(0, self._done - self.p.left_context)  # all that the labels can depend on
        window = self._words[first:]
        marks, cases = self.p.labels([window], starts=first == 0, ends=end)[0]
        lo, hi = self._done - first, upto - first
        out = apply_labels(window[lo:hi], marks[lo:hi], cases[lo:hi], self.p.mixed)
        self._done = upto
        return out


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


PunctSource = Union[str, Path, Punctuator]
"""a punctuation model's directory, or one loaded"""


def load_punctuator(model: Optional[PunctSource]) -> Optional[Punctuator]:
    """A punctuator from a directory, as given, or None."""
    if model is None or isinstance(model, Punctuator):
        return model
    return Punctuator.load(model)
