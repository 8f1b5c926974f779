"""Tokenizer: id 0 is the CTC blank and never encoded, round trips, clear vocab-size errors."""

import io
import pickle
import random
from pathlib import Path
from typing import List

import pytest
import sentencepiece as spm

from wenet_lite.config import TokenizerConfig
from wenet_lite.data.tokenizer import BLANK_ID, UNK_ID, Tokenizer, normalize_text

WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
    "and judge it's boxing match for twelve pounds of zinc"
).split()


VOCAB = 48  # these sentences allow at most 53 unigram pieces


@pytest.fixture(scope="module")
def sentences() -> List[str]:
    rng = random.Random(0)
    # Mixed case on purpose: training and encoding must normalise it the same way.
    return [
        " ".join(
            rng.choice(WORDS).upper() if rng.random() < 0.5 else rng.choice(WORDS)
            for _ in range(rng.randint(3, 12))
        )
        for _ in range(200)
    ]


@pytest.fixture(scope="module")
def unigram(sentences: List[str], tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tok") / "unigram.model"
    return Tokenizer.train(sentences, TokenizerConfig("unigram", VOCAB), path)


def _char_size(sentences: List[str]) -> int:
    chars = set("".join(normalize_text(s) for s in sentences)) - {" "}
    return len(chars) + 3  # + <blank>, <unk> and the word boundary '▁'


@pytest.mark.parametrize("model_type", ["unigram", "bpe", "char"])
def test_blank_is_id_zero_and_never_encoded(
    model_type: str, sentences: List[str], tmp_path: Path
) -> None:
    size = _char_size(sentences) if model_type == "char" else VOCAB
    tok = Tokenizer.train(sentences, TokenizerConfig(model_type, size), tmp_path / "m.model")
    assert tok.vocab_size == size
    assert tok.pieces()[:2] == ["<blank>", "<unk>"]
    assert tok.id_to_piece(BLANK_ID) == "<blank>" and tok.unk_id == UNK_ID
    for s in sentences:
        ids = tok.encode(s)
        assert ids and BLANK_ID not in ids and UNK_ID not in ids
        assert tok.decode(ids) == normalize_text(s)
    # The blank is dropped on decode, as CTC wants.
    assert tok.decode([BLANK_ID] + tok.encode("lazy dog") + [BLANK_ID]) == "LAZY DOG"


def test_case_is_normalised(unigram: Tokenizer) -> None:
    assert unigram.encode("the  Lazy dog ") == unigram.encode("THE LAZY DOG")
    assert unigram.decode(unigram.encode("the lazy dog")) == "THE LAZY DOG"


def test_bytes_file_and_pickle_round_trips_give_identical_ids(
    unigram: Tokenizer, sentences: List[str], tmp_path: Path
) -> None:
    copies = [
        Tokenizer.from_bytes(unigram.to_bytes()),
        pickle.loads(pickle.dumps(unigram)),
    ]
    unigram.save(tmp_path / "copy.model")
    copies.append(Tokenizer.load(tmp_path / "copy.model"))
    for copy in copies:
        assert copy.pieces() == unigram.pieces()
        assert [copy.encode(s) for s in sentences] == [unigram.encode(s) for s in sentences]


def test_train_writes_the_model(sentences: List[str], tmp_path: Path) -> None:
    path = tmp_path / "sub" / "bpe.model"
    tok = Tokenizer.train(sentences, TokenizerConfig("bpe", 50), path)
    assert path.read_bytes() == tok.to_bytes()


def test_unknown_only_text_is_detectable(unigram: Tokenizer) -> None:
    ids = unigram.encode("@@@ ###")
    assert ids, "unknown text still encodes to '▁' and <unk> pieces"
    assert BLANK_ID not in ids
    assert not unigram.has_known_pieces(ids)
    assert not unigram.has_known_pieces(unigram.encode("   "))
    assert unigram.has_known_pieces(unigram.encode("@@@ dog"))


def test_too_large_vocab_names_the_size(sentences: List[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tokenizer.vocab_size \(5000\) is too large") as e:
        Tokenizer.train(sentences, TokenizerConfig("unigram", 5000), tmp_path / "m.model")
    assert "set tokenizer.vocab_size <=" in str(e.value)


def test_too_small_vocab_names_the_minimum(sentences: List[str], tmp_path: Path) -> None:
    need = _char_size(sentences)
    with pytest.raises(ValueError, match=rf"too small.*>= {need}"):
        Tokenizer.train(sentences, TokenizerConfig("bpe", 5), tmp_path / "m.model")


@pytest.mark.parametrize("delta", [-1, 1])
def test_char_vocab_must_match_the_characters(
    delta: int, sentences: List[str], tmp_path: Path
) -> None:
    need = _char_size(sentences)
    cfg = TokenizerConfig("char", need + delta)
    with pytest.raises(ValueError, match=rf"has exactly {need} pieces"):
        Tokenizer.train(sentences, cfg, tmp_path / "m.model")


def test_no_text_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no non-empty transcripts"):
        Tokenizer.train(["", "  "], TokenizerConfig(), tmp_path / "m.model")


def test_foreign_and_corrupt_models_are_rejected(sentences: List[str], tmp_path: Path) -> None:
    buffer = io.BytesIO()
    # sentencepiece's defaults put <unk> at 0: no blank for CTC.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s.upper() for s in sentences]),
        model_writer=buffer,
        vocab_size=40,
        minloglevel=2,
    )
    (tmp_path / "foreign.model").write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="foreign.model was not trained for CTC"):
        Tokenizer.load(tmp_path / "foreign.model")
    with pytest.raises(ValueError, match="not a serialized sentencepiece model"):
        Tokenizer.from_bytes(b"not a model")
    with pytest.raises(FileNotFoundError, match="missing.model"):
        Tokenizer.load(tmp_path / "missing.model")


def test_decode_rejects_ids_outside_the_vocabulary(unigram: Tokenizer) -> None:
    with pytest.raises(ValueError, match=f"token id {VOCAB} is outside 0..{VOCAB - 1}"):
        unigram.decode([2, VOCAB])
