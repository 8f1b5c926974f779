"""Helpers for the training tests: prepared data dirs built from cut lists."""

import shutil
from pathlib import Path
from typing import Callable, Dict

import pytest
from lhotse import CutSet

from wenet_lite.data.manifest import save_cuts


@pytest.fixture
def make_data(synthetic_corpus, tmp_path: Path) -> Callable[[Dict[str, CutSet]], Path]:
    """Write ``{part: cuts}`` as a prepared data dir (with the corpus's cmvn.json)."""

    def make(parts: Dict[str, CutSet]) -> Path:
        data = tmp_path / "data"
        for part, cuts in parts.items():
            save_cuts(cuts, data / part / "cuts.jsonl.gz")
        shutil.copy(synthetic_corpus.data / "cmvn.json", data / "cmvn.json")
        return data

    return make
