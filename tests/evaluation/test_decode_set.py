"""Batch decoding of a cuts manifest: outputs, scores, batching, bad audio, full-context models."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict

import pytest
from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lite.data.manifest import cut_samples, cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_cuts, decode_model
from wenet_lite.evaluation.wer import sum_counts, word_errors
from wenet_lite.features.audio import load_audio
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import open_recognizer
from wenet_lite.search.options import SearchOptions

CHUNK4 = Chunking(4, -1)


def _hyps(out: Path) -> Dict[str, str]:
    lines = (out / "hyp.txt").read_text().splitlines()
    return {utt: text for utt, _, text in (line.partition(" ") for line in lines)}


def test_decode_writes_hypotheses_details_and_summary(corpus: Path, tiny, tmp_path: Path) -> None:
    data = corpus / "test-clean"
    report = decode_cuts(open_recognizer(tiny.path, offline=DecodeOptions()), data, tmp_path)
    cuts = {c.id: c for c in load_cuts(data)}
    hyps = _hyps(tmp_path)
    assert sorted(hyps) == sorted(cuts) and all(hyps.values())
    # The summary's counts are those of the written hypotheses against the references.
    counts = sum_counts(word_errors(normalize_text(cut_text(cuts[u])), h) for u, h in hyps.items())
    summary = (tmp_path / "summary.txt").read_text()
    assert (
        f"[ S={counts.substitutions}, D={counts.deletions}, I={counts.insertions} / "
        f"{counts.ref_len} ]" in summary
    )
    assert f"model {tiny.path}" in summary and "failed 0" in summary and "RTF" in summary
    details = (tmp_path / "details.txt").read_text()
    for utt in cuts:
        assert f"{utt} ref:" in details and f"{utt} token@seconds:" in details
    assert not (tmp_path / "errors.txt").exists()
    assert report.audio_seconds == pytest.approx(sum(c.duration for c in cuts.values()))
    assert 0 < report.rtf < 1


@pytest.mark.parametrize("chunk,simulate", [(0, False), (4, True)])
def test_batching_does_not_change_results(corpus: Path, tiny, chunk: int, simulate: bool) -> None:
    cuts = list(load_cuts(corpus / "test-clean"))
    results = []
    for seconds in (1.0, 1000.0):  # one utterance per batch, and all in one padded batch
        opts = DecodeOptions(
            chunking=Chunking(chunk), simulate_streaming=simulate, batch_seconds=seconds
        )
        report = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts)
        results.append([(r.utt_id, r.hyp.tokens, r.hyp.timestamps) for r in report.results])
    assert results[0] == results[1] and all(tokens for _, tokens, _ in results[0])


def test_bad_audio_is_named_and_the_rest_decoded(
    corpus: Path, bad_audio: Dict[str, Path], tiny, tmp_path: Path
) -> None:
    good = list(load_cuts(corpus / "test-clean"))[:3]
    bad = bad_audio
    cuts = good + [_with_audio(good[0], kind, path) for kind, path in bad.items()]
    CutSet.from_cuts(cuts).to_file(tmp_path / "cuts.jsonl.gz")
    report = decode_cuts(
        open_recognizer(tiny.path, offline=DecodeOptions()),
        tmp_path / "cuts.jsonl.gz",
        tmp_path / "out",
    )
    assert sorted(_hyps(tmp_path / "out")) == sorted(c.id for c in good)
    assert sorted(utt for utt, _ in report.failures) == sorted(bad)
    for utt, message in report.failures:
        assert str(bad[utt]) in message
    errors = (tmp_path / "out" / "errors.txt").read_text()
    assert all(str(path) in errors for path in bad.values())
    assert f"failed {len(bad)}" in (tmp_path / "out" / "summary.txt").read_text()


def _with_audio(cut, name: str, path: Path):
    """``cut`` renamed ``name`` and pointing at another audio file."""
    rec = cut.recording
    source = fastcopy(rec.sources[0], source=str(path))
    recording = fastcopy(rec, id=name, sources=[source])
    sup = fastcopy(cut.supervisions[0], id=name, recording_id=name)
    return fastcopy(cut, id=name, recording=recording, supervisions=[sup])


def test_segment_cuts_read_their_part_of_the_file(corpus: Path) -> None:
    cut = list(load_cuts(corpus / "test-clean"))[0]
    whole = load_audio(cut.recording.sources[0].source, 16000)
    assert (cut_samples(cut, 16000) == whole).all()
    part = cut.truncate(offset=0.5, duration=1.0)
    assert (cut_samples(part, 16000) == whole[8000:24000]).all()


def test_full_context_model_and_chunks(
    corpus: Path, full_context_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = corpus / "test-clean"
    with pytest.raises(ValueError, match="causal_conv") as info:
        open_recognizer(
            full_context_model,
            offline=DecodeOptions(chunking=CHUNK4, simulate_streaming=True),
        )
    assert str(full_context_model) in str(info.value)
    with caplog.at_level(logging.WARNING):
        decode_cuts(
            open_recognizer(full_context_model, offline=DecodeOptions(chunking=CHUNK4)),
            data,
            tmp_path,
        )
    assert "will not match streaming" in caplog.text and str(full_context_model) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        decode_cuts(open_recognizer(full_context_model, offline=DecodeOptions()), data, tmp_path)
    assert not caplog.text


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="simulate_streaming=True needs chunk_size > 0"):
        DecodeOptions(simulate_streaming=True)
    with pytest.raises(ValueError, match="search mode"):
        SearchOptions(mode="beam")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix_beam"):
        SearchOptions(lm="lm.json")
    with pytest.raises(ValueError, match="left chunks"):
        Chunking(0, 4)


def test_nbest_file(corpus: Path, tiny, tmp_path: Path) -> None:
    opts = DecodeOptions(SearchOptions(mode="prefix_beam", beam_size=4, nbest=3))
    decode_cuts(open_recognizer(tiny.path, offline=opts), corpus / "test-clean", tmp_path)
    hyps = _hyps(tmp_path)
    rows: Dict[str, list] = {}
    for line in (tmp_path / "nbest.txt").read_text().splitlines():
        utt, rank, score, text = (line.split(" ", 3) + [""])[:4]
        rows.setdefault(utt, []).append((int(rank), float(score), text))
    assert sorted(rows) == sorted(hyps)
    for utt, entries in rows.items():
        assert [r for r, _, _ in entries] == [1, 2, 3] and entries[0][2] == hyps[utt]
        scores = [s for _, s, _ in entries]
        assert scores == sorted(scores, reverse=True) and len(set(t for *_, t in entries)) == 3
