"""`wenet-lite import-wenet`: a WeNet model directory (tests/fixtures/wenet, written by
its make_golden.py from WeNet's code) becomes a model file whose outputs are WeNet's own:
full context, chunk-masked, streamed chunk by chunk (batched streams each at their own
offset), on every engine, and exported for sherpa-onnx in its offset convention. Bad
directories fail in one line naming the file or key, and write nothing."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch
import yaml

from tests.wenet.test_wenet_decoder import _differences as decoder_differences
from wenet_lite.cli import main
from wenet_lite.files.model_file import load_model
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.posenc import WENET_MAX_POSITIONS
from wenet_lite.model.state import stack_states, unstack_state
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.engines import OnnxRuntimeEngine, TorchEngine, stream_log_probs
from wenet_lite.wenet.convert import WenetImportError, import_wenet

CASES = Path(__file__).parents[1] / "fixtures" / "wenet"
NAMES = ["librispeech", "aishell", "gigaspeech", "batchnorm", "eps1e-12"]
STREAMING = ["librispeech", "aishell", "gigaspeech", "eps1e-12"]
EPS = {"eps1e-12": 1e-12}
TOL = 1e-4


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    out = tmp_path_factory.mktemp("imported")
    return {n: import_wenet(CASES / n, out / f"{n}.pt", EPS.get(n, 1e-5)) for n in NAMES}


def _golden(name: str) -> dict:
    return torch.load(CASES / name / "golden.pt", weights_only=True)


def _diff(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    n = min(ours.size(-2), theirs.size(-2))
    return float((ours[..., :n, :] - theirs[..., :n, :]).abs().max())


@pytest.mark.parametrize("name", NAMES)
def test_imported_model_file_gives_wenets_outputs(imported, name: str) -> None:
    model, tokenizer, cfg = load_model(imported[name])
    golden = _golden(name)
    feats, lens = golden["feats"], golden["lens"]
    assert cfg.encoder.pos_enc == "wenet" and cfg.features.snip_edges
    assert tokenizer.vocab_size == golden["ctc_full"].size(-1)
    with torch.no_grad():
        full, out_lens = model.encoder(feats, lens)
        rows = 2 if cfg.encoder.causal_conv else 1  # WeNet pads a centred conv its own way
        ctc = model.ctc(full)
        for i, n in enumerate(out_lens.tolist()[:rows]):  # valid frames, not padding
            assert _diff(full[i, :n], golden["full"][i, :n]) < TOL
            assert _diff(ctc[i, :n], golden["ctc_full"][i, :n]) < TOL
            assert torch.equal(ctc[i, :n].argmax(-1), golden["ctc_full"][i, :n].argmax(-1))
        if cfg.encoder.causal_conv:
            for left in (-1, 4):
                masked, _ = model.encoder(feats, lens, 16, left)
                for i, n in enumerate(out_lens.tolist()):
                    assert _diff(masked[i, :n], golden[f"chunk16_{left}"][i, :n]) < TOL
    assert max(decoder_differences(model.decoder, name)) < TOL  # both decoders' log-probs


@pytest.mark.parametrize("name", STREAMING)
def test_imported_model_streams_as_wenet(imported, name: str) -> None:
    """Chunk by chunk (16/-1, 16/4) and through the torch engine as a stream computes it."""
    model, _, _ = load_model(imported[name])
    golden = _golden(name)
    one = golden["feats"][:1]
    with torch.no_grad():
        for left in (-1, 4):
            out = model.encoder.forward_chunk_by_chunk(one, 16, left)
            assert _diff(out, golden[f"stream16_{left}"]) < TOL
            engine = TorchEngine(model, Chunking(16, left))
            log_probs, _ = stream_log_probs(engine, model, one, golden["lens"][:1])
            want = model.ctc(golden[f"stream16_{left}"])
            assert _diff(log_probs, want) < TOL
            n = want.size(1)
            assert torch.equal(log_probs[0, :n].argmax(-1), want[0, :n].argmax(-1))


def _chunks(engine, model, feats: torch.Tensor, k: int, state=None):
    """Run ``k`` windows of one utterance through ``engine``; returns log-probs and state."""
    sub = model.encoder.subsampling
    c = engine.chunking.chunk_size
    window = sub.window_size(c)
    state = engine.init_state(1) if state is None else state
    outs = []
    for i in range(k):
        x = feats[:, i * c * sub.rate : i * c * sub.rate + window]
        lp, state = engine.run(x, torch.tensor([window]), state)
        outs.append(lp)
    return torch.cat(outs, 1), state


@pytest.mark.parametrize("engine_kind", ["torch", "onnxruntime", "executorch"])
def test_batched_streams_each_keep_their_offset(imported, engine_kind: str) -> None:
    """A stream 3 chunks in and a new one, batched, each equal their run alone."""
    model, _, _ = load_model(imported["librispeech"])
    chunking = Chunking(16, 4)
    if engine_kind == "torch":
        engine = TorchEngine(model, chunking)
    elif engine_kind == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx

        engine = OnnxRuntimeEngine(export_batched_onnx(model, chunking), chunking)
    else:
        pytest.importorskip("executorch")
        from wenet_lite.export.executorch import lower_executorch
        from wenet_lite.runtime.engines import ExecuTorchEngine

        engine = ExecuTorchEngine(lower_executorch(model, chunking), chunking)
    feats = _golden("librispeech")["feats"]
    window = model.encoder.subsampling.window_size(16)
    with torch.no_grad():
        _, old = _chunks(engine, model, feats[:1], 3)
        assert old.offset.tolist() == [48]
        shift = 3 * 16 * 4
        x = torch.cat([feats[:1, shift : shift + window], feats[1:2, :window]])
        both, state = engine.run(x, torch.tensor([window, window]), stack_states(
            [old, engine.init_state(1)]))  # fmt: skip
        alone_old, _ = engine.run(x[:1], torch.tensor([window]), old)
        alone_new, _ = _chunks(engine, model, feats[1:2], 1)
    assert state.offset.tolist() == [64, 16]
    assert [s.offset.tolist() for s in unstack_state(state)] == [[64], [16]]
    assert _diff(both[:1], alone_old) < TOL and _diff(both[1:], alone_new) < TOL
    # The torch engine's log-probs of the 4th chunk are WeNet's (16/4).
    want = model.ctc(_golden("librispeech")["stream16_4"])[:, 48:64]
    assert _diff(alone_old, want) < TOL


def test_offset_switched_off_breaks_streaming_parity(imported, monkeypatch) -> None:
    """Negative control: every chunk at offset 0 moves the streamed output 100 times as far
    from WeNet's as float rounding does (little on these tiny random models, 1e-3)."""
    model, _, _ = load_model(imported["librispeech"])
    golden = _golden("librispeech")
    with torch.no_grad():
        right = _diff(model.encoder.forward_chunk_by_chunk(golden["feats"][:1], 16, 4),
                      golden["stream16_4"])  # fmt: skip
    real = ConformerEncoder._key_tables

    def at_zero(self, offset, m, c, tables):
        return real(self, torch.zeros_like(offset), m, c, tables)

    monkeypatch.setattr(ConformerEncoder, "_key_tables", at_zero)
    with torch.no_grad():
        out = model.encoder.forward_chunk_by_chunk(golden["feats"][:1], 16, 4)
    assert _diff(out, golden["stream16_4"]) > 100 * right


@pytest.mark.parametrize("name", ["librispeech", "aishell"])
def test_onnx_export_in_sherpas_offset_convention_equals_wenets(imported, tmp_path, name) -> None:
    """sherpa-onnx starts the offset at C*N with a hidden zero cache (as WeNet's ONNX
    runtime); the export reads it and gives WeNet's outputs in that convention. Fed offsets
    from 0 instead (the negative control), it is 100 times as far from them."""
    ort = pytest.importorskip("onnxruntime")
    from tests.export.sherpa_loop import OnnxStreamer
    from wenet_lite.export.onnx import export_onnx

    written = export_onnx(imported[name], tmp_path / "onnx", chunk_size=16, left_chunks=4)
    session = ort.InferenceSession(str(written["model"]), providers=["CPUExecutionProvider"])
    golden = _golden(name)
    model, _, _ = load_model(imported[name])
    want = model.ctc(golden["sherpa16_4"])[0].detach().numpy()
    got = OnnxStreamer(session).accept_features(golden["feats"][0].numpy())
    right = np.abs(got - want).max()
    assert got.shape == want.shape and right < TOL

    class FromZero(OnnxStreamer):
        def accept_window(self, window):
            real_run = self.session.run

            def run(names, feeds):
                feeds["offset"] = feeds["offset"] - self.chunk_size * self.left_chunks
                return real_run(names, feeds)

            self.session.run = run
            try:
                return super().accept_window(window)
            finally:
                self.session.run = real_run

    wrong = FromZero(session).accept_features(golden["feats"][0].numpy())
    assert np.abs(wrong - want).max() > 100 * right


def test_gigaspeech_is_refused_for_sherpa_in_one_line(imported, tmp_path, capsys) -> None:
    out = ["--out", str(tmp_path / "o")]
    rc = main(["export", "--model", str(imported["gigaspeech"]), "--format", "onnx",
               "--chunk-size", "16", "--left-chunks", "4", *out])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "subsampling_rate is 6" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "model.onnx").exists()


def test_a_segment_ends_where_wenets_positions_end(imported, caplog) -> None:
    """Without endpoints a segment is ended at WeNet's table end (here lowered to 64 frames to
    keep the test short): logged, the offset restarts, nothing fails."""
    model, tokenizer, cfg = load_model(imported["librispeech"])
    rec = open_recognizer((model, tokenizer, cfg), Chunking(16, 4),
                          endpoint=EndpointConfig(enabled=False))  # fmt: skip
    assert rec.segment_rules.max_frames == WENET_MAX_POSITIONS
    rec.segment_rules = dataclasses.replace(rec.segment_rules, max_frames=64)
    seen = []
    real = rec.engine.run

    def run(feats, lens, state):
        seen.append(int(state.offset.max()))
        return real(feats, lens, state)

    rec.engine.run = run
    stream = rec.create_stream()
    samples = np.random.default_rng(0).standard_normal(16000 * 6).astype(np.float32) * 0.3
    with caplog.at_level(logging.INFO, logger="wenet_lite.runtime.endpoint"):
        stream.accept_waveform(16000, samples)
        stream.input_finished()
        rec.decode_until_done([stream])
    assert max(seen) + 16 <= 64 and seen.count(0) >= 3
    assert "without an endpoint: ended there" in caplog.text


def test_cli_import_then_stream_with_rescoring(tmp_path, capsys) -> None:
    out = tmp_path / "m.pt"
    assert main(["import-wenet", str(CASES / "aishell"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    import soundfile as sf

    wav = tmp_path / "a.wav"
    rng = np.random.default_rng(1)
    sf.write(wav, (rng.standard_normal(16000 * 2) * 0.2).astype(np.float32), 16000)
    rc = main(["stream", "--model", str(out), str(wav), "--chunk-size", "16",
               "--left-chunks", "4", "--mode", "attention_rescoring"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err


def _bad_dir(tmp_path: Path, name: str = "librispeech") -> Path:
    d = tmp_path / "wenet"
    shutil.copytree(CASES / name, d)
    (d / "golden.pt").unlink()
    return d


def _import_fails(d: Path, tmp_path: Path, capsys) -> str:
    out = tmp_path / "out" / "m.pt"
    assert main(["import-wenet", str(d), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    return err


@pytest.mark.parametrize("missing", ["final.pt", "units.txt", "train.yaml"])
def test_a_missing_file_is_named(tmp_path, capsys, missing: str) -> None:
    d = _bad_dir(tmp_path)
    (d / missing).unlink()
    assert f"no {missing}" in _import_fails(d, tmp_path, capsys)


@pytest.mark.parametrize("key, value", [("encoder", "branchformer"), ("model", "paraformer"),
                                        ("model", "transducer")])  # fmt: skip
def test_an_architecture_we_do_not_have_is_named(tmp_path, capsys, key: str, value: str) -> None:
    d = _bad_dir(tmp_path)
    train = yaml.safe_load((d / "train.yaml").read_text())
    train[key] = value
    (d / "train.yaml").write_text(yaml.safe_dump(train))
    err = _import_fails(d, tmp_path, capsys)
    assert f"'{value}' cannot be imported" in err and "supported: WeNet's U2/U2++ conformer" in err
    if value == "transducer":  # why, and what to do instead
        assert "stateless predictor" in err and "model.transducer_weight" in err


def test_an_unknown_key_is_named(tmp_path, capsys) -> None:
    d = _bad_dir(tmp_path)
    state = torch.load(d / "final.pt", weights_only=True)
    state["encoder.encoders.0.adapter.weight"] = torch.zeros(2)
    torch.save(state, d / "final.pt")
    assert "encoder.encoders.0.adapter.weight" in _import_fails(d, tmp_path, capsys)


def test_a_vocabulary_that_disagrees_with_units_is_named(tmp_path, capsys) -> None:
    d = _bad_dir(tmp_path)
    units = (d / "units.txt").read_text().splitlines()
    units.append(f"EXTRA {len(units)}")
    (d / "units.txt").write_text("\n".join(units) + "\n")
    err = _import_fails(d, tmp_path, capsys)
    assert "units.txt" in err and "ctc.ctc_lo.weight" in err


def test_train_yaml_that_disagrees_with_the_weights_is_named(tmp_path, capsys) -> None:
    d = _bad_dir(tmp_path)
    train = yaml.safe_load((d / "train.yaml").read_text())
    train["encoder_conf"]["num_blocks"] = 12
    (d / "train.yaml").write_text(yaml.safe_dump(train))
    err = _import_fails(d, tmp_path, capsys)
    assert "encoder_conf.num_blocks is 12, but the weights have 2" in err


def test_an_older_checkpoint_with_position_tables_imports(tmp_path) -> None:
    """Checkpoints since 2024 keep the position table buffers: dropped (recomputed)."""
    d = _bad_dir(tmp_path)
    state = torch.load(d / "final.pt", weights_only=True)
    state["encoder.embed.pos_enc.pe"] = torch.zeros(1, 5000, 32)
    torch.save(state, d / "final.pt")
    with pytest.raises(WenetImportError):  # a truly unknown key still fails
        bad = dict(state, **{"encoder.mystery": torch.zeros(1)})
        torch.save(bad, d / "final.pt")
        import_wenet(d, tmp_path / "x.pt")
    torch.save(state, d / "final.pt")
    assert import_wenet(d, tmp_path / "m.pt").is_file()


@pytest.mark.parametrize("name", ["librispeech", "aishell"])
def test_rescoring_picks_wenets_best_path(imported, name: str) -> None:
    """Attention rescoring over an n-best gives the scores WeNet's formula gives with WeNet's
    own decoder log-probs: (1 - rw) * l2r + rw * r2l + ctc_weight * ctc, and the same best."""
    from wenet_lite.search.ctc_search import Hypothesis
    from wenet_lite.search.rescore import Segment, rescore

    model, _, cfg = load_model(imported[name])
    golden = _golden(name)
    hyps, n = golden["hyps"], int(golden["full_lens"][0])
    sos = cfg.decoder.sos_eos_id
    ctc_scores = [-4.0, -1.5, -2.5]
    rw, cw = 0.3, 0.5
    wenet = []
    for i, h in enumerate(hyps):
        l2r = golden["decoder_l2r"][i, torch.arange(len(h) + 1), torch.tensor([*h, sos])].sum()
        r2l = golden["decoder_r2l"][i, torch.arange(len(h) + 1), torch.tensor([*h[::-1], sos])]
        wenet.append(float((1 - rw) * l2r + rw * r2l.sum() + cw * ctc_scores[i]))
    nbest = [Hypothesis(list(h), s, list(range(len(h))), 1.0) for h, s in zip(hyps, ctc_scores)]
    (ours,) = rescore(model.decoder, [Segment(nbest, golden["full"][0, :n])], cw, rw)
    by_tokens = {tuple(h.tokens): h.score for h in ours}
    for h, score in zip(hyps, wenet):
        assert abs(by_tokens[tuple(h)] - score) < 1e-3
    assert ours[0].tokens == hyps[max(range(len(hyps)), key=wenet.__getitem__)]


@pytest.mark.parametrize("name", ["librispeech", "aishell"])  # JSON, Kaldi text
def test_cmvn_is_read_from_global_cmvn_when_the_weights_lack_it(tmp_path, name: str) -> None:
    """WeNet's own CMVN buffers (computed by WeNet from global_cmvn) equal what the importer
    computes from the file; without the file the import fails naming it."""
    d = _bad_dir(tmp_path, name)
    state = torch.load(d / "final.pt", weights_only=True)
    mean, istd = state.pop("encoder.global_cmvn.mean"), state.pop("encoder.global_cmvn.istd")
    torch.save(state, d / "final.pt")
    model, _, _ = load_model(import_wenet(d, tmp_path / "m.pt"))
    assert torch.allclose(model.encoder.cmvn.mean, mean, rtol=1e-5)
    assert torch.allclose(model.encoder.cmvn.istd, istd, rtol=1e-4)
    (d / "global_cmvn").unlink()
    with pytest.raises(WenetImportError, match="no global_cmvn"):
        import_wenet(d, tmp_path / "n.pt")


def test_a_model_subsampling_by_6_streams_exactly(imported) -> None:
    """GigaSpeech's shape: the recogniser's streamed tokens (audio in random pieces, batched
    with another stream) equal its simulated streaming over the whole audio."""
    from wenet_lite.features.stream_fbank import offline_fbank
    from wenet_lite.search.ctc_search import ctc_greedy_search
    from wenet_lite.search.options import SearchOptions

    model, tokenizer, cfg = load_model(imported["gigaspeech"])
    chunking = Chunking(8, 2)
    search = SearchOptions(blank_penalty=2.0)
    rec = open_recognizer((model, tokenizer, cfg), chunking, search,
                          endpoint=EndpointConfig(enabled=False))  # fmt: skip
    rng = np.random.default_rng(3)
    audios = [(rng.standard_normal(16000 * s) * 0.3).astype(np.float32) for s in (3, 2)]
    streams = [rec.create_stream() for _ in audios]
    for s, audio in zip(streams, audios):
        i = 0
        while i < len(audio):
            n = int(rng.integers(1, 4000))
            s.accept_waveform(16000, audio[i : i + n])
            i += n
            rec.decode_streams([x for x in streams if x.is_ready])
        s.input_finished()
    rec.decode_until_done(streams)
    engine = TorchEngine(model, chunking)
    for s, audio in zip(streams, audios):
        feats = offline_fbank(audio, cfg.features)[None]
        log_probs, _ = stream_log_probs(engine, model, feats, torch.tensor([feats.size(1)]))
        log_probs = log_probs.clone()
        log_probs[..., 0] -= 2.0  # the blank penalty, as the search applies it
        lens = torch.tensor([log_probs.size(1)])
        want = ctc_greedy_search(torch.log_softmax(log_probs, -1), lens)[0].tokens
        assert s.result().token_ids == want and want


def _edit_yaml(d: Path, change) -> None:
    train = yaml.safe_load((d / "train.yaml").read_text())
    change(train)
    (d / "train.yaml").write_text(yaml.safe_dump(train))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda t: t.update(dataset_conf="hello"), "dataset_conf must be a mapping, got str"),
        (lambda t: t.update(encoder_conf=[1, 2]), "encoder_conf must be a mapping, got list"),
        (
            lambda t: t["dataset_conf"]["fbank_conf"].update(num_mel_bins="abc"),
            "dataset_conf.fbank_conf.num_mel_bins must be an integer, got str 'abc'",
        ),
        (
            lambda t: t["dataset_conf"]["fbank_conf"].update(dither="lots"),
            "dataset_conf.fbank_conf.dither must be a number, got str 'lots'",
        ),
        (
            lambda t: t["encoder_conf"].update(causal="yes"),
            "encoder_conf.causal must be true or false",
        ),
    ],
)
def test_wrong_typed_train_yaml_is_one_line_naming_the_key(tmp_path, capsys, change, words):
    d = _bad_dir(tmp_path)
    _edit_yaml(d, change)
    err = _import_fails(d, tmp_path, capsys)
    assert f"{d / 'train.yaml'}: {words}" in err


def test_an_anchor_bomb_in_train_yaml_is_one_short_line(tmp_path, capsys) -> None:
    from tests.test_config import _anchor_bomb

    d = _bad_dir(tmp_path)
    text = (d / "train.yaml").read_text()
    bomb = _anchor_bomb()
    text = text.replace("output_size: ", "output_size: *a8\n  unused_: ", 1)
    (d / "train.yaml").write_text(bomb + "\n" + text)
    err = _import_fails(d, tmp_path, capsys)
    assert "encoder_conf.output_size must be an integer, got list [" in err and len(err) < 400


def test_non_finite_weights_or_cmvn_are_refused(tmp_path, capsys) -> None:
    d = _bad_dir(tmp_path)
    state = torch.load(d / "final.pt", weights_only=True)
    state["ctc.ctc_lo.weight"][0, 0] = float("nan")
    torch.save(state, d / "final.pt")
    assert "ctc.proj.weight holds 1 NaN or infinite" in _import_fails(d, tmp_path, capsys)
    state["ctc.ctc_lo.weight"][0, 0] = 0.0
    state.pop("encoder.global_cmvn.mean"), state.pop("encoder.global_cmvn.istd")
    torch.save(state, d / "final.pt")
    stats = json.loads((d / "global_cmvn").read_text())
    stats["mean_stat"][3] = float("inf")
    (d / "global_cmvn").write_text(json.dumps(stats))
    assert "global_cmvn: CMVN statistics hold NaN or infinity" in _import_fails(d, tmp_path, capsys)
    for text in ("[ ]", "[" * 100_000 + "]" * 100_000, "[ 1 2 3 ]"):  # Kaldi text, no matrix
        (d / "global_cmvn").write_text(text)
        assert "global_cmvn: not WeNet CMVN statistics (a Kaldi matrix of 2 rows holds" in (
            _import_fails(d, tmp_path, capsys)
        )


def test_bpe_units_without_bpe_model_decode_exactly(tmp_path, caplog) -> None:
    """Without bpe.model, ids spell the same text as with it (decoding is exact) and the
    import says what needs the BPE model; an empty bpe.model is refused."""
    import random

    d = _bad_dir(tmp_path)
    _, with_bpe, _ = load_model(import_wenet(d, tmp_path / "a.pt"))
    (d / "bpe.model").unlink()
    with caplog.at_level(logging.WARNING):
        _, units_only, cfg = load_model(import_wenet(d, tmp_path / "b.pt"))
    assert any("without bpe.model" in r.getMessage() and "--bpe" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    rng = random.Random(0)
    for _ in range(100):
        ids = [rng.randrange(2, with_bpe.vocab_size - 1) for _ in range(12)]
        assert units_only.decode(ids) == with_bpe.decode(ids)
    assert cfg.tokenizer.model_type == "bpe"
    (d / "bpe.model").write_bytes(b"")
    with pytest.raises(ValueError, match="bpe.model: a sentencepiece model without pieces"):
        import_wenet(d, tmp_path / "c.pt")


@pytest.mark.parametrize("command", ["transcribe", "stream"])
def test_a_wenet_directory_or_final_pt_as_model_says_to_import(tmp_path, capsys, command):
    import soundfile as sf

    wav = tmp_path / "a.wav"
    sf.write(wav, np.zeros(1600, np.float32), 16000)
    for model in (CASES / "librispeech", CASES / "librispeech" / "final.pt"):
        assert main([command, "--model", str(model), str(wav)]) in (1, 2)
        err = capsys.readouterr().err
        assert "first (`wenet-lite import-wenet`)" in err, err
        assert err.count("\n") == 1 and "export" not in err.replace("import-wenet", "")


def test_a_pickled_payload_in_final_pt_is_refused_without_advice_to_load_it(tmp_path, capsys):
    class Payload:
        def __reduce__(self):
            return (print, ("pickled code ran",))

    d = _bad_dir(tmp_path)
    state = torch.load(d / "final.pt", weights_only=True)
    state["extra"] = Payload()
    torch.save(state, d / "final.pt")
    err = _import_fails(d, tmp_path, capsys)
    assert "holds Python objects" in err and "weights_only" not in err
    assert "pickled code ran" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["units.txt", "global_cmvn", "train.yaml"])
def test_non_utf8_files_are_named(tmp_path, capsys, name: str) -> None:
    d = _bad_dir(tmp_path)
    if name == "global_cmvn":  # read only when the weights lack CMVN
        state = torch.load(d / "final.pt", weights_only=True)
        state.pop("encoder.global_cmvn.mean"), state.pop("encoder.global_cmvn.istd")
        torch.save(state, d / "final.pt")
    (d / name).write_bytes((d / name).read_bytes() + b"\n\xff\xfe\n")
    assert f"{d / name}: not UTF-8 text (byte 0xff" in _import_fails(d, tmp_path, capsys)


def test_deeply_nested_cmvn_json_is_one_line(tmp_path, capsys) -> None:
    d = _bad_dir(tmp_path)
    state = torch.load(d / "final.pt", weights_only=True)
    state.pop("encoder.global_cmvn.mean"), state.pop("encoder.global_cmvn.istd")
    torch.save(state, d / "final.pt")
    (d / "global_cmvn").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    assert "global_cmvn: not JSON this reader takes (nested too deeply)" in _import_fails(
        d, tmp_path, capsys
    )
