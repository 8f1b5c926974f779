"""A punctuation model trained on a small grammar's text (registered by tests/conftest.py):
what the output paths' tests punctuate with."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from wenet_lite.punct.model import PunctConfig
from wenet_lite.punct.train import PunctTrainOptions, train_punct

NAMES = ["john", "mary", "paris", "london"]
NOUNS = ["cat", "dog", "house", "river", "letter", "garden", "window", "train"]
VERBS = ["saw", "liked", "found", "painted", "opened", "left"]


def sentence(rng: random.Random) -> str:
    """A sentence of a small grammar with learnable marks: questions open with a question
    word and end with ?, a clause after "but" follows a comma, names are capitalised, NASA
    is upper case and McDonald mixed."""
    subject = rng.choice(NAMES).capitalize() if rng.random() < 0.5 else f"the {rng.choice(NOUNS)}"
    obj = rng.choice([f"the {rng.choice(NOUNS)}", rng.choice(NAMES).capitalize(), "NASA",
                      "McDonald"])  # fmt: skip
    kind = rng.random()
    if kind < 0.25:
        s = f"did {subject} see {obj}?"
    elif kind < 0.5:
        s = (
            f"{subject} {rng.choice(VERBS)} {obj}, but {rng.choice(NAMES).capitalize()} "
            f"{rng.choice(VERBS)} the {rng.choice(NOUNS)}."
        )
    elif kind < 0.6:
        s = f"what a {rng.choice(NOUNS)}!"
    else:
        s = f"{subject} {rng.choice(VERBS)} {obj}."
    return s[0].upper() + s[1:]


def write_text(path: Path, lines: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    text = "\n".join(" ".join(sentence(rng) for _ in range(rng.randint(1, 4)))
                     for _ in range(lines))  # fmt: skip
    path.write_text(text + "\n", encoding="utf-8")
    return path


TINY = PunctConfig(dim=64, num_layers=3, left=3, right=2, buckets=4096, vocab_size=500)


@pytest.fixture(scope="session")
def punct_model(tmp_path_factory) -> Path:
    """A small model trained on the grammar's text (about 10 s on a CPU)."""
    d = tmp_path_factory.mktemp("punct")
    text = write_text(d / "text.txt", 1500)
    torch.manual_seed(0)
    train_punct([text], d / "model", TINY, PunctTrainOptions(max_steps=250, batch_words=1024,
                                                              lr=3e-3), progress=False)  # fmt: skip
    return d / "model"
