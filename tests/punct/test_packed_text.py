"""train-punct reads its text into packed arrays: the same held-out lines, vocabulary,
mixed-case forms and training windows as the labelled lists give, in a fraction of the memory."""

from __future__ import annotations

import itertools
import random
import tracemalloc
from collections import Counter

from wenet_lite.punct import train as T
from wenet_lite.punct.model import BOS, EOS
from wenet_lite.punct.text import mixed_forms

LINES = [
    "The cat sat on the mat, and the dog watched it.",
    "Did you see iPhone sales in the U.S. last year?",
    "What a day! We walked to Paris, then to Rome.",
    "no marks here at all",
    "McDonald's opened a shop near the station; nobody came.",
]


def _text(tmp_path, repeat: int):
    rng = random.Random(0)
    path = tmp_path / "text.txt"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(repeat):
            words = rng.choice(LINES).split()
            f.write(" ".join(words[: rng.randint(3, len(words))]) + "\n\n")  # blank lines skipped
    return path


def _list_windows(train, window, rng, count):
    """The windows as the lists gave them (the former reader), for comparison."""
    flat = [w for ws in train for w in ws]
    ends = list(itertools.accumulate(len(ws) for ws in train))
    starts = {0, *ends}
    out = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.4:
            k = rng.randrange(len(ends))
            start = ends[k - 1] if k else 0
            stop = min(len(flat), start + window)
        elif kind < 0.8:
            stop = ends[rng.randrange(len(ends))]
            start = max(0, stop - rng.randint(1, window))
        else:
            start = rng.randrange(max(1, len(flat) - 1))
            stop = min(len(flat), start + window)
        items = ([(BOS, -100, -100)] if start in starts else []) + [
            (w.word, w.mark, w.case) for w in flat[start:stop]
        ] + ([(EOS, -100, -100)] if stop in starts else [])  # fmt: skip
        out.append(([i[0] for i in items], [i[1] for i in items], [i[2] for i in items]))
    return out


def test_packed_text_trains_on_what_the_lists_did(tmp_path) -> None:
    path = _text(tmp_path, 400)
    train, held = T._split(T.read_training_text([path]), 0.05, 0)
    packed, held2 = T.read_split_text([path], 0.05, 0)
    assert held2 == held and len(held) == 20
    assert len(packed) == sum(map(len, train)) and len(packed.ends) == len(train)
    counts = Counter(w.word for ws in train for w in ws)
    assert packed.most_common(50, 2) == [w for w, c in counts.most_common(50) if c >= 2]
    assert packed.mixed_forms() == mixed_forms(train) and packed.mixed_forms()["iphone"] == "iPhone"
    for window in (3, 16, 64):
        got = T._RunningText(packed).windows(window, random.Random(window), 300)
        assert got == _list_windows(train, window, random.Random(window), 300)
    # control: another seed holds out other lines
    assert T.read_split_text([path], 0.05, 1)[1] != held


def test_whole_line_windows_hold_one_line_from_bos_to_eos(tmp_path) -> None:
    path = _text(tmp_path, 200)
    train, _ = T._split(T.read_training_text([path]), 0.05, 0)
    packed, _ = T.read_split_text([path], 0.05, 0)
    lines = {tuple(w.word for w in ws) for ws in train}
    text = T._RunningText(packed)
    for window in (4, 64):
        for words, marks, cases in text.windows(window, random.Random(1), 200, whole_lines=1.0):
            assert words[0] == BOS and marks[0] == cases[0] == -100
            inner = tuple(words[1:-1] if words[-1] == EOS else words[1:])
            if words[-1] == EOS:  # the whole line, closed
                assert inner in lines and len(inner) <= window
            else:  # a line longer than the window: its first words
                assert len(inner) == window and any(line[:window] == inner for line in lines)

    # a share: about that many windows are one line alone; without it, few are by chance
    def alone(share):
        got = text.windows(64, random.Random(2), 1000, whole_lines=share)
        return sum(w[0] == BOS and w[-1] == EOS and tuple(w[1:-1]) in lines for w, _, _ in got)

    assert 350 < alone(0.4) < 460 and alone(0.0) < 50


def test_hidden_words_are_known_words_made_unknown() -> None:
    import torch

    from wenet_lite.punct.model import EOS_ID, PAD, UNK

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (64, 64))
    hidden = T.hide_words(ids, 0.3)
    changed = hidden != ids
    assert (hidden[changed] == UNK).all() and (ids[changed] > EOS_ID).all()
    share = changed.sum() / ((ids > EOS_ID).sum())
    assert 0.27 < share < 0.33, share
    assert (hidden[ids <= EOS_ID] == ids[ids <= EOS_ID]).all() and (ids == PAD).any()
    assert T.hide_words(ids, 0.0) is ids


def test_packed_text_holds_a_fraction_of_the_lists_memory(tmp_path) -> None:
    path = _text(tmp_path, 20_000)

    def peak(read) -> int:
        tracemalloc.start()
        kept = read()
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del kept
        return size

    lists = peak(lambda: T._split(T.read_training_text([path]), 0.05, 0))
    packed = peak(lambda: T.read_split_text([path], 0.05, 0))
    text_bytes = path.stat().st_size
    assert lists > 20 * text_bytes  # the labelled lists: tens of bytes a byte of text
    assert packed < lists / 5, (packed, lists, text_bytes)
