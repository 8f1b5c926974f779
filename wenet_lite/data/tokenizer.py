"""sentencepiece tokenizer whose id 0 is the CTC blank.

Ids 0 and 1 are reserved: 0 is ``<blank>`` (sentencepiece's pad piece, a control symbol, so
``encode`` never produces it and ``decode`` drops it) and 1 is ``<unk>``; there is no bos/eos.
The model travels as its serialized proto (:meth:`Tokenizer.to_bytes`), so checkpoints and
exported models carry the exact tokenizer they were trained with.

Case: every text, for training and for encoding, goes through :func:`normalize_text`, which
upper-cases it (LibriSpeech's convention) and collapses whitespace. Decoded text is therefore
upper-case; score hypotheses against ``normalize_text(reference)``. sentencepiece's own NFKC
normalisation is stored in the model and applied on top.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Iterable, List, Sequence, Union

import sentencepiece as spm

from wenet_lite.config import TokenizerConfig

__all__ = ["BLANK_ID", "UNK_ID", "WORD_START", "Tokenizer", "normalize_text"]

BLANK_ID = 0
UNK_ID = 1
_BLANK_PIECE = "<blank>"
WORD_START = "\u2581"
"""sentencepiece's '▁': a piece that starts with it starts a word (the one definition)"""
# sentencepiece reports a vocabulary that does not fit the text only in these messages.
_TOO_HIGH = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"smaller than required_chars\. \d+ vs (\d+)")

Pathlike = Union[str, Path]


def normalize_text(text: str) -> str:
    """Upper-case and collapse whitespace: the one text form used for training and encoding."""
    return " ".join(text.upper().split())


class Tokenizer:
    """A trained sentencepiece model with the blank at id 0 and ``<unk>`` at id 1."""

    def __init__(self, model_proto: bytes, source: str = "<bytes>") -> None:
        self._load(bytes(model_proto), source)
        _check_reserved_ids(self._sp, source)

    def _load(self, proto: bytes, source: str) -> None:
        self._proto = proto
        self._sp = _processor(proto, source)
        self._size = min(self._sp.get_piece_size(), _declared_size(proto))

    @classmethod
    def train(cls, texts: Iterable[str], cfg: TokenizerConfig, out_path: Pathlike) -> Tokenizer:
        """Train on transcripts, write the model to ``out_path`` and return it.

        Raises ValueError when there is no text, or when ``cfg.vocab_size`` does not fit the
        text (the message gives the size that would).
        """
        sentences = [s for s in (normalize_text(t) for t in texts) if s]
        if not sentences:
            raise ValueError(f"no non-empty transcripts to train the tokenizer {out_path} on")
        if cfg.model_type == "char":
            proto = _train_char(sentences, cfg.vocab_size)
        else:
            proto = _train_proto(sentences, cfg.model_type, cfg.vocab_size)
        tokenizer = cls(proto, source=str(out_path))
        tokenizer.save(out_path)
        return tokenizer

    @classmethod
    def load(cls, path: Pathlike) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer model not found: {path}")
        return cls(path.read_bytes(), source=str(path))

    @classmethod
    def from_bytes(cls, data: bytes) -> Tokenizer:
        return cls(data)

    def to_bytes(self) -> bytes:
        """The serialized sentencepiece model proto (what :meth:`from_bytes` reads)."""
        return self._proto

    def save(self, path: Pathlike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._proto)

    @property
    def vocab_size(self) -> int:
        """Number of ids, blank and ``<unk>`` included: the CTC head's output size."""
        return self._size

    @property
    def unk_id(self) -> int:
        return UNK_ID

    def encode(self, text: str) -> List[int]:
        """Ids of the normalised text; never contains the blank (0). Empty text gives [].
        A piece past the vocabulary (kept for segmentation only, see :func:`_declared_size`)
        is ``<unk>``."""
        ids = self._sp.encode(normalize_text(text), out_type=int)
        return [i if i < self._size else UNK_ID for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (ints or 0-dim tensors); blanks are dropped, ``<unk>`` reads ' ⁇ '."""
        plain = [int(i) for i in ids]
        for token_id in plain:
            self._check_id(token_id)
        return self._sp.decode(plain)

    def id_to_piece(self, token_id: int) -> str:
        self._check_id(token_id)
        return self._sp.id_to_piece(token_id)

    def pieces(self) -> List[str]:
        """All pieces in id order (``pieces()[0] == '<blank>'``), e.g. for a ``tokens.txt``."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def has_known_pieces(self, ids: Sequence[int]) -> bool:
        """False when ``ids`` carry no text: empty, or only ``<unk>`` and bare word boundaries.

        Text made only of characters the model never saw encodes to ``['▁', '<unk>']``, which is
        not empty, so "is the target empty" is the wrong test; a trainer skips these.
        """
        boundary = self._sp.piece_to_id(WORD_START)
        return any(i not in (UNK_ID, boundary) for i in ids)

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside 0..{self.vocab_size - 1}")

    # SentencePieceProcessor holds C++ state; pickle the proto so DataLoader workers get a copy.
    def __getstate__(self) -> dict:
        return {"proto": self._proto}

    def __setstate__(self, state: dict) -> None:
        self._load(state["proto"], "<pickle>")


def _declared_size(proto: bytes) -> int:
    """The vocabulary the model declares (``trainer_spec.vocab_size``). A model converted from
    another toolkit's units (``wenet_lite.wenet.units``) holds, after its vocabulary, the
    pieces its segmentation needs but the vocabulary lacks; they read as ``<unk>``, as there."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return model.trainer_spec.vocab_size or len(model.pieces)


def _processor(proto: bytes, source: str) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as e:
        raise ValueError(f"{source} is not a serialized sentencepiece model ({e})") from None


def _check_reserved_ids(sp: spm.SentencePieceProcessor, source: str) -> None:
    if sp.get_piece_size() < 2 or not sp.is_control(BLANK_ID) or sp.unk_id() != UNK_ID:
        first = [sp.id_to_piece(i) for i in range(min(2, sp.get_piece_size()))]
        raise ValueError(
            f"{source} was not trained for CTC: ids 0 and 1 must be a control piece (the blank) "
            f"and <unk>, got {first}; train it with Tokenizer.train"
        )


def _trainer_args(model_type: str, vocab_size: int) -> dict:
    return dict(
        model_type=model_type,
        vocab_size=vocab_size,
        pad_id=BLANK_ID,
        pad_piece=_BLANK_PIECE,
        unk_id=UNK_ID,
        bos_id=-1,
        eos_id=-1,
        # Every character of the transcripts gets a piece: ASR output must be able to spell
        # every reference, and the default 0.9995 silently maps rare letters to <unk>.
        character_coverage=1.0,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )


def _train_proto(sentences: List[str], model_type: str, vocab_size: int) -> bytes:
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=buffer,
            **_trainer_args(model_type, vocab_size),
        )
    except RuntimeError as e:
        raise _vocab_error(str(e), model_type, vocab_size, len(sentences)) from None
    return buffer.getvalue()


def _vocab_error(message: str, model_type: str, vocab_size: int, num: int) -> Exception:
    """Turn sentencepiece's internal check failures into a message naming the config key."""
    too_high = _TOO_HIGH.search(message)
    if too_high:
        return ValueError(
            f"tokenizer.vocab_size ({vocab_size}) is too large for these {num} transcripts: "
            f"a {model_type} model can have at most {too_high.group(1)} pieces here; set "
            f"tokenizer.vocab_size <= {too_high.group(1)} or train on more text"
        )
    too_low = _TOO_LOW.search(message)
    if too_low:
        return ValueError(
            f"tokenizer.vocab_size ({vocab_size}) is too small: the transcripts use "
            f"{too_low.group(1)} characters and special pieces; set tokenizer.vocab_size >= "
            f"{too_low.group(1)}"
        )
    return RuntimeError(f"sentencepiece training ({model_type}, {vocab_size}) failed: {message}")


def _train_char(sentences: List[str], vocab_size: int) -> bytes:
    """A char model has exactly one piece per character, so its size is not a free choice.

    sentencepiece ignores a too-large vocab_size for chars and silently drops the rarest
    characters for a too-small one; train with room for all of them and demand an exact match.
    """
    proto = _train_proto(sentences, "char", 1 << 20)
    needed = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
    if needed != vocab_size:
        size = "too large" if vocab_size > needed else "too small"
        raise ValueError(
            f"tokenizer.vocab_size ({vocab_size}) is {size}: a char model of these "
            f"{len(sentences)} transcripts has exactly {needed} pieces (characters plus "
            f"<blank> and <unk>); set tokenizer.vocab_size to {needed}"
        )
    return proto
