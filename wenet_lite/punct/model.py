"""The punctuation and casing model: a word's embedding (its own, when it is among the
training text's frequent words, plus the sum of its hashed character n-grams, so unseen words
still have one) read by a stack of 1-D convolutions, each seeing ``left`` words before and
``right`` words after; two heads label each word with its mark and its case.

The receptive field is bounded on both sides: ``num_layers * left`` words before,
``num_layers * right`` after. A word's labels depend on those words alone, so a stream can label
a word once ``right_context`` words follow it and get what the whole text gives
(:class:`~wenet_lite.punct.punctuator.PunctStream`). Padding is masked after every layer:
batched equals alone, and a text's end reads as the end of text.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Dict, List, Sequence, Tuple

import torch
from torch import nn

from wenet_lite.punct.text import CASES, MARKS

__all__ = ["BOS", "EOS", "MAX_PARAMETERS", "PunctConfig", "PunctModel", "WordFeatures"]

PAD, UNK, BOS_ID, EOS_ID = 0, 1, 2, 3
BOS, EOS = "<s>", "</s>"
"""where a text starts and ends (a window cut from the middle of one has neither): a text's
first capital and last mark are learnt from them, not from the padding"""


_LIMITS = {"dim": (1, 2048), "num_layers": (1, 32), "left": (0, 64), "right": (0, 64),
           "buckets": (1, 1 << 22), "vocab_size": (0, 1 << 21)}  # fmt: skip
"""each size's range: far above any punctuation model, far below what a hostile file asks"""
MAX_PARAMETERS = 200_000_000


@dataclass(frozen=True)
class PunctConfig:
    dim: int = 192
    num_layers: int = 4
    left: int = 4
    """words before each word that one layer sees"""
    right: int = 2
    """words after each word that one layer sees"""
    buckets: int = 1 << 16
    """hashed character n-gram embeddings"""
    vocab_size: int = 20000
    """the most frequent training words that get an embedding of their own"""
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name, (low, high) in _LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} {value!r}: give a whole number in {low}..{high}")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout {self.dropout!r}: give a number in [0, 1)")
        if self.parameters() > MAX_PARAMETERS:
            raise ValueError(f"{self.parameters():,} parameters: at most {MAX_PARAMETERS:,} "
                             "(a punctuation model is a few million)")  # fmt: skip

    def parameters(self) -> int:
        """How many weights the model of this config has (about)."""
        block = 2 * self.dim * self.dim * (self.left + 1 + self.right) + 4 * self.dim
        return (self.vocab_size + 4 + self.buckets) * self.dim + self.num_layers * block

    @property
    def right_context(self) -> int:
        return self.num_layers * self.right

    @property
    def left_context(self) -> int:
        return self.num_layers * self.left

    def to_dict(self) -> dict:
        return asdict(self)


class WordFeatures:
    """Word ids and character n-gram ids (n = 2..4 of ``<word>``), cached per word."""

    def __init__(self, vocab: Sequence[str], buckets: int) -> None:
        self.vocab = list(vocab)
        self.ids = {w: i + 4 for i, w in enumerate(self.vocab)}
        self.ids.update({BOS: BOS_ID, EOS: EOS_ID})
        self.buckets = buckets
        self._grams: Dict[str, List[int]] = {}

    def grams(self, word: str) -> List[int]:
        got = self._grams.get(word)
        if got is None:
            s = f"<{word}>"
            got = [zlib.crc32(s[i : i + n].encode("utf-8")) % self.buckets
                   for n in (2, 3, 4) for i in range(max(len(s) - n + 1, 1))]  # fmt: skip
            if len(self._grams) < 200_000:
                self._grams[word] = got
        return got

    def batch(self, texts: Sequence[Sequence[str]]) -> Tuple[torch.Tensor, ...]:
        """(B, N) word ids (PAD past each text), flat n-gram ids and their (B*N,) offsets for
        ``EmbeddingBag``, and the (B, N) mask of real words."""
        B, N = len(texts), max((len(t) for t in texts), default=0)
        ids = torch.zeros(B, N, dtype=torch.long)
        mask = torch.zeros(B, N, dtype=torch.bool)
        flat: List[int] = []
        offsets: List[int] = []
        for b, words in enumerate(texts):
            for n in range(N):
                offsets.append(len(flat))
                if n < len(words):
                    w = words[n]
                    ids[b, n] = self.ids.get(w, UNK)
                    mask[b, n] = True
                    flat.extend(self.grams(w))
        return ids, torch.tensor(flat, dtype=torch.long), torch.tensor(offsets), mask


class _Block(nn.Module):
    def __init__(self, cfg: PunctConfig) -> None:
        super().__init__()
        self.left, self.right = cfg.left, cfg.right
        self.norm = nn.LayerNorm(cfg.dim)
        self.conv = nn.Conv1d(cfg.dim, 2 * cfg.dim, cfg.left + 1 + cfg.right)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = self.norm(x).transpose(1, 2)  # (B, D, N)
        y = nn.functional.pad(y, (self.left, self.right))
        y = nn.functional.glu(self.conv(y), dim=1).transpose(1, 2)
        return (x + self.drop(y)) * mask.unsqueeze(2)


class PunctModel(nn.Module):
    def __init__(self, cfg: PunctConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.words = nn.Embedding(cfg.vocab_size + 4, cfg.dim, padding_idx=PAD)
        self.grams = nn.EmbeddingBag(cfg.buckets, cfg.dim, mode="mean")
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.marks = nn.Linear(cfg.dim, len(MARKS))
        self.cases = nn.Linear(cfg.dim, len(CASES))

    def forward(
        self, ids: torch.Tensor, grams: torch.Tensor, offsets: torch.Tensor, mask: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(B, N, 5) mark logits and (B, N, 4) case logits of each word."""
        B, N = ids.shape
        x = self.words(ids) + self.grams(grams, offsets).view(B, N, -1)
        x = x * mask.unsqueeze(2)
        for block in self.blocks:
            x = block(x, mask)
        x = self.norm(x)
        return self.marks(x), self.cases(x)
