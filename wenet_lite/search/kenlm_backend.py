"""KenLM as the word LM's backend (the ``kenlm`` extra): ARPA files of any size, and KenLM's
binary files, scored in C++ from memory KenLM lays out compactly, where the Python reader
(:class:`~wenet_lite.search.arpa.ArpaLM`) holds every n-gram in dictionaries (a 2.2 M n-gram
ARPA took 0.8 GB and 17 s).

:class:`KenLM` is an :class:`~wenet_lite.search.arpa.NGramLM`: the same ``log_prob(history,
word)`` in natural log, so the prefix beam's fusion, hotwords beside it and perplexity work
unchanged; an ARPA file gives the Python reader's scores (tested to 1e-4). KenLM's state of a
history (its last ``order - 1`` words) is kept per history and reused, so an n-gram costs one
call into KenLM once its history has been seen.

The words of an ARPA file are read from its 1-gram section (the fusion's out-of-vocabulary
rule needs them); a binary file does not list them, so its words are asked of KenLM one at a
time (``word in lm.words``), and the fusion charges its out-of-vocabulary penalty when an
unknown word is complete rather than where its spelling leaves every known word.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence, Union

from wenet_lite.fileio import naming_text_errors, open_text
from wenet_lite.search.arpa import BOS, CACHE_LIMIT, UNK, NGramLM

__all__ = ["BINARY_MAGIC", "KenLM", "is_kenlm_binary", "kenlm_available"]

_LN10 = math.log(10.0)
BINARY_MAGIC = b"mmap lm http://kheafield.com/code"
"""how KenLM's binary files begin"""
Pathlike = Union[str, Path]


def kenlm_available() -> bool:
    """Whether the ``kenlm`` module (``pip install 'wenet_lite[kenlm]'``) imports."""
    try:
        import kenlm  # noqa: F401
    except ImportError:
        return False
    return True


def is_kenlm_binary(path: Pathlike) -> bool:
    """Whether ``path`` is one of KenLM's binary files (by its first bytes)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(BINARY_MAGIC)) == BINARY_MAGIC
    except OSError:
        return False


class _AskKenLM:
    """The words of a binary file, asked of KenLM one at a time (they cannot be listed)."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word not in (BOS, UNK) and word in self._model

    def __iter__(self) -> Iterator[str]:
        return iter(())  # unknown: nothing to list


class KenLM(NGramLM):
    """A word n-gram LM read by KenLM from an ARPA or a binary file (module docstring)."""

    def __init__(self, model: Any, words: Optional[Iterable[str]], source: str) -> None:
        import kenlm

        self._kenlm = kenlm
        self._model = model
        self.source = source
        super().__init__(int(model.order), words if words is not None else ())
        if words is None:
            self.words = _AskKenLM(model)  # type: ignore[assignment]
        self.listed = words is not None
        """whether :attr:`words` can be listed (an ARPA file), not only asked"""
        self._states: Dict[str, Any] = {}

    @classmethod
    def load(cls, path: Pathlike) -> KenLM:
        """KenLM's model of an ARPA (gzipped if named .gz) or binary file; errors name it."""
        import kenlm

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"language model not found: {path}")
        binary = is_kenlm_binary(path)
        words = None if binary else list(_arpa_words(path))
        with _plain(path) as plain:  # KenLM's wheel may read no gzip: a plain copy for it
            try:
                model = kenlm.Model(str(plain), kenlm.Config())
            except (OSError, RuntimeError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise ValueError(f"{path}: KenLM cannot read it ({first[:200]})") from None
        return cls(model, words, str(path))

    def _state(self, context: Sequence[str]) -> Any:
        """KenLM's state after ``context`` (its last words; ``<s>`` first at a sentence
        start), cached per context."""
        key = " ".join(context)
        state = self._states.get(key)
        if state is not None:
            return state
        if len(self._states) >= CACHE_LIMIT:
            self._states.clear()
        state = self._kenlm.State()
        words = list(context)
        if words and words[0] == BOS:
            self._model.BeginSentenceWrite(state)
            words = words[1:]
        else:
            self._model.NullContextWrite(state)
        for word in words:
            after = self._kenlm.State()
            self._model.BaseScore(state, word, after)
            state = after
        self._states[key] = state
        return state

    def _log_prob(self, context: Sequence[str], word: str) -> float:
        out = self._kenlm.State()
        return self._model.BaseScore(self._state(context), word, out) * _LN10


@contextlib.contextmanager
def _plain(path: Path) -> Iterator[Path]:
    """``path``, or for a gzipped file a decompressed copy that lives while KenLM reads it
    (it builds its own tables in memory from the text)."""
    if path.suffix != ".gz":
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        yield plain


def _arpa_words(path: Path) -> Iterator[str]:
    """The words of an ARPA file's 1-gram section (``<s>`` left out), read to its end only."""
    with open_text(path) as f, naming_text_errors(path):
        inside = False
        for raw in f:
            line = raw.strip()
            if line == "\\1-grams:":
                inside = True
            elif inside and line.startswith("\\"):
                return
            elif inside and line:
                parts = line.split()
                if len(parts) >= 2 and parts[1] != BOS:
                    yield UNK if parts[1] == "<UNK>" else parts[1]
