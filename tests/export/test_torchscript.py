"""TorchScript export: scripted == eager after a save/load round trip, metadata, int8, errors."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from tests.export.conftest import without_decoder
from wenet_lite.cli import main
from wenet_lite.config import load_config
from wenet_lite.export.common import export_metadata
from wenet_lite.export.torchscript import export_torchscript
from wenet_lite.files.checkpoint import CheckpointError
from wenet_lite.files.model_file import save_model
from wenet_lite.model import build_model
from wenet_lite.model.linear import Linear

if TYPE_CHECKING:  # fixtures come from conftest, types only here
    from tests.export.conftest import ModelFile

TINY = Path(__file__).resolve().parents[2] / "conf" / "tiny_test.yaml"


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(a, b, atol=atol, rtol=0)


@pytest.mark.parametrize("chunk,left", [(4, 2), (4, -1), (3, 0)])
def test_scripted_equals_eager_after_round_trip(
    tiny_model_file: ModelFile, tmp_path: Path, chunk: int, left: int
) -> None:
    path = export_torchscript(tiny_model_file.path, tmp_path / "m.ts", chunk, left)
    scripted = torch.jit.load(str(path))
    model = tiny_model_file.model
    enc = model.encoder
    torch.manual_seed(1)
    feats = torch.randn(2, 120, 80)
    lens = torch.tensor([120, 93])
    window, shift = enc.subsampling.window_size(chunk), chunk * enc.subsampling.rate
    with torch.no_grad():
        s_eager = enc.init_state(2, chunk, left)
        s_script = scripted.init_state(2)
        for k in range(5):  # >= 3 chained chunks: cache filling, then full (or growing)
            x = feats[:, k * shift : k * shift + window]
            out, s_eager = enc.forward_chunk(x, s_eager)
            log_probs, s_script = scripted.forward_chunk(x, s_script)
            _close(log_probs, model.ctc(out))
            for a, b in zip(s_script, s_eager):
                _close(a, b)
        expected, expected_lens = model.ctc_log_probs(feats, lens, chunk, left)
        got, got_lens = scripted(feats, lens)
    assert torch.equal(got_lens, expected_lens)
    _close(got, expected)


def test_short_last_window_and_too_long_window(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    path = export_torchscript(tiny_model_file.path, tmp_path / "m.ts", 4, 2)
    scripted = torch.jit.load(str(path))
    model = tiny_model_file.model
    feats = torch.randn(1, 41, 80)  # 2 full windows of 19 frames 16 apart, then 9 frames
    with torch.no_grad():
        expected = model.ctc(model.encoder.forward_chunk_by_chunk(feats, 4, 2))
        state = scripted.init_state(1)
        outs = []
        for start in (0, 16, 32):
            log_probs, state = scripted.forward_chunk(feats[:, start : start + 19], state)
            outs.append(log_probs)
        _close(torch.cat(outs, 1), expected)
        assert outs[-1].size(1) == 1
        with pytest.raises(Exception, match="at most 19 frames"):
            scripted.forward_chunk(torch.randn(1, 20, 80), state)


def test_metadata_round_trips(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    path = export_torchscript(tiny_model_file.path, tmp_path / "m.ts", 4, 2)
    extra = {"metadata.json": "", "tokens.txt": ""}
    scripted = torch.jit.load(str(path), _extra_files=extra)
    model, tokenizer, cfg = tiny_model_file.model, tiny_model_file.tokenizer, tiny_model_file.cfg
    meta = dict(scripted.metadata())
    assert meta == export_metadata(cfg, model, 4, 2, "none")
    assert list(scripted.vocabulary()) == tokenizer.pieces()
    # torch returns extra files as bytes (str in older releases)
    files = {k: v.decode() if isinstance(v, bytes) else v for k, v in extra.items()}
    stored = json.loads(files["metadata.json"])
    assert stored == {"metadata": meta, "vocabulary": tokenizer.pieces()}
    lines = files["tokens.txt"].splitlines()
    assert "archive/extra/metadata.json" in zipfile.ZipFile(path).namelist()  # for zip readers
    assert lines[0] == "<blank> 0" and lines[1] == "<unk> 1" and len(lines) == tokenizer.vocab_size
    shipped = load_config(TINY).features  # the metadata says what the shipped config says
    expected = {
        "sample_rate": str(shipped.sample_rate), "num_mel_bins": str(shipped.num_mel_bins),
        "frame_shift_ms": str(shipped.frame_shift_ms),
        "frame_length_ms": str(shipped.frame_length_ms),
        "snip_edges": str(shipped.snip_edges).lower(), "dither": "0.0", "low_freq": "20.0",
        "high_freq": "-400.0", "window_type": "povey", "sample_scale": "32768.0",
        "subsampling_rate": "4", "right_context": "6", "chunk_size": "4", "left_chunks": "2",
        "window_size": "19", "window_shift": "16", "vocab_size": str(tokenizer.vocab_size),
        "quantize": "none",
    }  # fmt: skip
    assert {k: meta[k] for k in expected} == expected


def test_int8_is_quantized_and_close(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    fp32 = torch.jit.load(str(export_torchscript(tiny_model_file.path, tmp_path / "a.ts", 4, 2)))
    path = export_torchscript(tiny_model_file.path, tmp_path / "b.ts", 4, 2, quantize="int8")
    int8 = torch.jit.load(str(path))
    assert int8.metadata()["quantize"] == "int8"
    # every Linear but the position projections holds packed int8 weights
    linears = tiny_model_file.model.named_modules()
    expected = sum(isinstance(m, Linear) and not n.endswith("rel_pos.proj") for n, m in linears)
    packed = sum(m.original_name == "LinearPackedParams" for m in int8.modules())
    assert packed == expected > 0
    feats = torch.randn(1, 150, 80)
    lens = torch.tensor([150])
    with torch.no_grad():
        a, _ = fp32(feats, lens)
        b, _ = int8(feats, lens)
    diff = (a - b).abs().max().item()
    assert 0 < diff < 0.5, diff


def test_full_context_model_exports_forward_only(
    tmp_path: Path, tiny_model_file: ModelFile
) -> None:
    cfg = load_config(TINY, ["encoder.causal_conv=false", "encoder.chunk.mode=full"])
    torch.manual_seed(0)
    model = build_model(cfg, tiny_model_file.tokenizer.vocab_size).eval()
    save_model(tmp_path / "full.pt", model, cfg, tiny_model_file.tokenizer)
    with pytest.raises(ValueError, match="full-context.*chunk size 0"):
        export_torchscript(tmp_path / "full.pt", tmp_path / "s.ts", 16, 4)
    path = export_torchscript(tmp_path / "full.pt", tmp_path / "f.ts", 0, -1)
    scripted = torch.jit.load(str(path))
    feats, lens = torch.randn(1, 90, 80), torch.tensor([90])
    with torch.no_grad():
        _close(scripted(feats, lens)[0], model.ctc_log_probs(feats, lens)[0])
        with pytest.raises(Exception, match="full-context"):
            scripted.init_state(1)


def test_export_refuses_missing_and_corrupt_model(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        export_torchscript(tmp_path / "nope.pt", tmp_path / "m.ts")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="bad.pt"):
        export_torchscript(bad, tmp_path / "m.ts")
    assert not (tmp_path / "m.ts").exists()


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_cli_reports_bad_model_without_traceback(tmp_path: Path, capsys, fmt: str) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00" * 100)
    for model in (tmp_path / "missing.pt", bad):
        argv = ["export", "--model", str(model), "--format", fmt, "--out", str(tmp_path / "o")]
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 1
        assert err.startswith("wenet-lite export: error:") and model.name in err
        assert "Traceback" not in err


def test_cli_exports_torchscript(tiny_model_file: ModelFile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.ts"
    argv = ["export", "--model", str(tiny_model_file.path), "--format", "torchscript"]
    assert main(argv + ["--chunk-size", "4", "--left-chunks", "1", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert torch.jit.load(str(out)).metadata()["left_chunks"] == "1"


def test_scripted_attention_decoder_equals_eager(
    speech_u2_model_file: ModelFile, tmp_path: Path
) -> None:
    path = export_torchscript(speech_u2_model_file.path, tmp_path / "u2.ts", 4, 2)
    scripted = torch.jit.load(str(path))
    model = speech_u2_model_file.model
    assert scripted.metadata()["decoder"] == "bitransformer"
    assert scripted.metadata()["sos_eos_id"] == str(model.ctc.proj.out_features)
    torch.manual_seed(2)
    feats = torch.randn(1, 120, 80)
    window = model.encoder.subsampling.window_size(4)
    with torch.no_grad():
        state = scripted.init_state(1)
        encoded, log_probs, state = scripted.encode_chunk(feats[:, :window], state)
        again, _ = scripted.forward_chunk(feats[:, :window], scripted.init_state(1))
        _close(log_probs, again)
        _close(log_probs, model.ctc(encoded))
        memory = torch.randn(1, 23, encoded.size(2))
        hyps = torch.randint(2, 40, (5, 7))
        lens = torch.tensor([7, 1, 4, 6, 2])
        for reverse in (0.0, 0.3, 1.0):
            got = scripted.forward_attention_decoder(hyps, lens, memory, reverse)
            want = model.decoder.score(
                memory.expand(5, -1, -1), torch.full((5,), 23), hyps, lens, reverse
            )
            _close(got, want, atol=1e-4)
    # A model without a decoder says so when asked to rescore.
    plain = torch.jit.load(
        str(
            export_torchscript(
                without_decoder(speech_u2_model_file, tmp_path), tmp_path / "p.ts", 4, 2
            )
        )
    )
    assert plain.metadata()["decoder"] == "none"
    with pytest.raises(Exception, match="has no attention decoder"):
        plain.forward_attention_decoder(hyps, lens, memory, 0.3)
