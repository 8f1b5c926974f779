"""WeNet's ``units.txt`` (with its ``bpe.model``, or character units) as a :class:`Tokenizer`
whose ids are WeNet's.

WeNet numbers its output units in ``units.txt`` (``<blank> 0``, ``<unk> 1``, ``<sos/eos>`` at 2
in current recipes or last in older ones, then the pieces in sorted order), while its
``bpe.model`` numbers them its own way (``<unk> 0``, ``<s> 1``, ``</s> 2``, ...). WeNet encodes
text with the BPE model and looks each piece up in ``units.txt`` (``<unk>`` when it is not
there); character units are the text's characters, a space read as ``▁``. The tokenizer made
here is a sentencepiece model laid out in ``units.txt``'s order, so its ids are WeNet's:

- BPE units: the pieces of ``bpe.model`` with their scores (segmentation is unchanged),
  reordered as ``units.txt``; ``bpe.model``'s pieces that ``units.txt`` lacks follow the
  vocabulary, for segmentation only, and encode as ``<unk>`` as in WeNet.
- Character units: a character model whose pieces are the units, text taken as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Union

from wenet_lite.data.tokenizer import BLANK_ID, UNK_ID, Tokenizer
from wenet_lite.fileio import read_text

__all__ = ["read_units", "wenet_tokenizer"]

SOS_EOS = "<sos/eos>"


def read_units(path: Union[str, Path]) -> List[str]:
    """The units of a WeNet ``units.txt`` in id order; ValueError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such units file")
    by_id = {}
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"{path}:{n}: expected 'UNIT ID', got {line[:60]!r}")
        if int(parts[1]) in by_id:
            raise ValueError(f"{path}:{n}: id {parts[1]} given twice")
        by_id[int(parts[1])] = parts[0]
    units = [by_id.get(i) for i in range(len(by_id))]
    if None in units:
        raise ValueError(f"{path}: ids are not 0..{len(by_id) - 1} (missing {units.index(None)})")
    if units[:2] != ["<blank>", "<unk>"] or SOS_EOS not in units:
        raise ValueError(
            f"{path}: WeNet units start '<blank> 0', '<unk> 1' and hold {SOS_EOS}; got {units[:3]}"
        )
    return units  # type: ignore[return-value]


def wenet_tokenizer(
    units_path: Union[str, Path],
    bpe_path: Optional[Union[str, Path]] = None,
    pieces_only: bool = False,
) -> Tokenizer:
    """The tokenizer of a WeNet model: ``units.txt`` and its ``bpe.model``, or character
    units without one. ``pieces_only``: BPE units without their ``bpe.model``: ids spell text
    exactly (decoding needs nothing more), but text is cut into the longest units that match,
    not by WeNet's merges (hotwords, LM words and fine-tuning need the BPE model)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    units = read_units(units_path)
    model = pb.ModelProto()
    scores = {}
    if bpe_path is not None:
        try:
            model.ParseFromString(Path(bpe_path).read_bytes())
        except FileNotFoundError:
            raise FileNotFoundError(f"{bpe_path}: no such BPE model") from None
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and kin
            raise ValueError(f"{bpe_path}: not a sentencepiece model ({e})") from None
        normal = (pb.ModelProto.SentencePiece.NORMAL, pb.ModelProto.SentencePiece.USER_DEFINED)
        scores = {p.piece: (p.score, p.type) for p in model.pieces if p.type in normal}
        if not scores:  # an empty file parses as an empty model: text would be cut by letters
            raise ValueError(f"{bpe_path}: a sentencepiece model without pieces (empty?)")
        del model.pieces[:]
    elif pieces_only:
        model.trainer_spec.model_type = pb.TrainerSpec.BPE
    else:
        _character_model(model)
    kinds = pb.ModelProto.SentencePiece
    for i, unit in enumerate(units):
        piece = model.pieces.add()
        piece.piece = unit
        if i == BLANK_ID or unit == SOS_EOS:
            piece.type = kinds.CONTROL
        elif i == UNK_ID:
            piece.type = kinds.UNKNOWN
        elif unit in scores:
            piece.score, piece.type = scores[unit]
        else:  # a unit the BPE model lacks (e.g. a non-language symbol), or a character
            character = bpe_path is None and not pieces_only
            piece.type = kinds.NORMAL if character else kinds.USER_DEFINED
    for unit, (score, kind) in scores.items():  # for segmentation; encoded as <unk>
        if unit not in units:
            piece = model.pieces.add()
            piece.piece, piece.score, piece.type = unit, score, kind
    spec = model.trainer_spec
    spec.vocab_size = len(units)
    spec.unk_id, spec.pad_id, spec.bos_id, spec.eos_id = UNK_ID, BLANK_ID, -1, -1
    spec.unk_piece, spec.pad_piece = "<unk>", "<blank>"
    return Tokenizer(model.SerializeToString(), source=str(units_path))


def _character_model(model) -> None:
    """Settings of a model that reads text character by character, as it is: a space is its
    own piece (``▁``), nothing is normalised or prefixed."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model.trainer_spec.model_type = pb.TrainerSpec.CHAR
    norm = model.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = False
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
