"""WeNet's units.txt (+ bpe.model, or characters) as a tokenizer: its ids are those of WeNet's
own tokenizer, as its make_golden.py recorded them from WeNet's code (tests/fixtures/wenet)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from wenet_lite.wenet.units import read_units, wenet_tokenizer

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "wenet"
BPE_CASES = ["librispeech", "gigaspeech", "batchnorm", "eps1e-12"]


def _tokenizer(case: Path):
    bpe = case / "bpe.model"
    return wenet_tokenizer(case / "units.txt", bpe if bpe.is_file() else None)


@pytest.mark.parametrize("name", [*BPE_CASES, "aishell"])
def test_ids_are_wenets(name: str) -> None:
    case = CASES / name
    golden = torch.load(case / "golden.pt", weights_only=True)
    tokenizer = _tokenizer(case)
    units = read_units(case / "units.txt")
    ctc_rows = torch.load(case / "final.pt", weights_only=True)["ctc.ctc_lo.weight"].size(0)
    assert tokenizer.vocab_size == len(units) == ctc_rows
    assert tokenizer.pieces() == units
    # Text the units can spell: English for BPE units, Chinese for character units. (WeNet
    # splits CJK characters out before BPE, and gives each unknown character its own <unk>
    # where sentencepiece gives a run of them one: text outside the units differs there.)
    spelled = [0, 1, 2] if name in BPE_CASES else [3]
    for i in spelled:
        assert tokenizer.encode(golden["text"][i]) == golden["text_ids"][i], golden["text"][i]
    assert any(1 in golden["text_ids"][i] for i in spelled) or name == "aishell"
    for i in spelled:  # back to the text
        text = golden["text"][i]
        if 1 not in golden["text_ids"][i]:
            assert tokenizer.decode(golden["text_ids"][i]) == text


def test_bpe_models_own_ids_are_not_wenets() -> None:
    """The negative control: without the reordering, bpe.model's ids are another numbering."""
    case = CASES / "librispeech"
    golden = torch.load(case / "golden.pt", weights_only=True)
    sp = spm.SentencePieceProcessor(model_file=str(case / "bpe.model"))
    assert sp.encode(golden["text"][1]) != golden["text_ids"][1]


@pytest.mark.parametrize(
    "text, message",
    [
        ("<blank> 0\n<unk> 1\nA 3\n<sos/eos> 2\nB x\n", "units.txt:5: expected 'UNIT ID'"),
        ("<blank> 0\n<unk> 1\nA 3\n", "ids are not 0..2 (missing 2)"),
        ("<unk> 0\n<blank> 1\n<sos/eos> 2\n", "start '<blank> 0', '<unk> 1'"),
        ("<blank> 0\n<unk> 1\n<sos/eos> 1\n", "units.txt:3: id 1 given twice"),
    ],
)
def test_bad_units_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "units.txt").write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_units(tmp_path / "units.txt")
    with pytest.raises(FileNotFoundError, match="no such units file"):
        read_units(tmp_path / "missing.txt")
