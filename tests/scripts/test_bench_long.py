"""benchmarks/bench_long.py: the long files hold the set's utterances end to end, and the one-by-one
WER it compares against counts the same utterances, repeats included."""

from __future__ import annotations

import soundfile as sf

from wenet_lite.data.manifest import cut_samples, cut_text, load_cuts


def test_long_files_are_the_utterances_end_to_end(synthetic_corpus, load_tool, tmp_path):
    tool = load_tool("bench_long")
    part = synthetic_corpus.data / "test-clean"
    folder = tool.build(part, tmp_path, [1])[1]
    cuts = {c.id: c for c in load_cuts(part)}
    ids = (folder / "utterances.txt").read_text().split()
    assert len(ids) > len(cuts)  # the 10-utterance set, repeated to fill a minute
    audio, rate = sf.read(folder / "audio.wav", dtype="float32")
    pieces = [cut_samples(cuts[i], rate) for i in ids]
    assert len(audio) == sum(len(p) for p in pieces) >= 60 * rate
    start = sum(len(p) for p in pieces[:3])  # the 4th utterance sits where it should
    assert abs(audio[start : start + len(pieces[3])] - pieces[3]).max() < 1e-4  # 16-bit PCM
    (long_cut,) = load_cuts(folder / "cuts.jsonl.gz")
    assert cut_text(long_cut) == " ".join(cut_text(cuts[i]) for i in ids)
    # the one-by-one WER weighs each utterance by how often the long file holds it
    single = {"utts": {i: [1 if i == ids[0] else 0, 10] for i in cuts}}
    expected = 100 * ids.count(ids[0]) / (10 * len(ids))
    assert tool.same_utterances_wer(single, folder) == expected
    assert tool.build(part, tmp_path, [1])[1] == folder  # built once
