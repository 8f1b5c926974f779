"""ONNX export: sherpa-onnx's interface, onnxruntime == eager chunk by chunk, int8, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from tests.export.conftest import without_decoder
from tests.export.sherpa_loop import OnnxStreamer, sherpa_attn_mask
from wenet_lite.config import load_config
from wenet_lite.export.onnx import (
    INPUT_NAMES,
    OUTPUT_NAMES,
    check_sherpa_compatible,
    export_onnx,
)

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

if TYPE_CHECKING:  # fixtures come from conftest, types only here
    from tests.export.conftest import ModelFile

TINY = Path(__file__).resolve().parents[2] / "conf" / "tiny_test.yaml"


def _session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _eager(model_file: ModelFile, feats: np.ndarray, chunk: int, left: int) -> np.ndarray:
    model = model_file.model
    with torch.no_grad():
        out = model.encoder.forward_chunk_by_chunk(torch.from_numpy(feats)[None], chunk, left)
        return model.ctc(out)[0].numpy()


@pytest.mark.parametrize("chunk,left", [(4, 2), (4, 0), (2, 3)])
def test_onnxruntime_equals_eager_chunk_by_chunk(
    tiny_model_file: ModelFile, tmp_path: Path, chunk: int, left: int
) -> None:
    paths = export_onnx(tiny_model_file.path, tmp_path, chunk, left)
    streamer = OnnxStreamer(_session(paths["model"]))
    num_chunks = left + 3  # the cache fills over `left` chunks, then stays full
    frames = (num_chunks - 1) * streamer.window_shift + streamer.window_size
    feats = np.random.default_rng(0).standard_normal((frames + 5, 80)).astype(np.float32)
    got = streamer.accept_features(feats)
    assert got.shape == (num_chunks * chunk, tiny_model_file.tokenizer.vocab_size)
    expected = _eager(tiny_model_file, feats[:frames], chunk, left)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_interface_is_what_sherpa_onnx_reads(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    paths = export_onnx(tiny_model_file.path, tmp_path, 4, 2)
    session = _session(paths["model"])
    enc = tiny_model_file.model.encoder
    blocks, heads, dim, kernel = enc.num_blocks, enc.num_heads, enc.d_model, enc.conv_kernel
    inputs = [(i.name, i.shape, i.type) for i in session.get_inputs()]
    assert inputs == [
        ("x", [1, 19, 80], "tensor(float)"),
        ("offset", [1], "tensor(int64)"),
        ("required_cache_size", [1], "tensor(int64)"),
        ("attn_cache", [blocks, heads, 8, 2 * dim // heads], "tensor(float)"),
        ("conv_cache", [blocks, 1, dim, kernel - 1], "tensor(float)"),
        ("attn_mask", [1, 1, 12], "tensor(bool)"),
    ]
    assert tuple(i[0] for i in inputs) == INPUT_NAMES
    vocab = tiny_model_file.tokenizer.vocab_size
    outputs = [(o.name, o.shape) for o in session.get_outputs()]
    assert outputs == [
        ("log_probs", [1, 4, vocab]),
        ("next_att_cache", inputs[3][1]),
        ("next_conv_cache", inputs[4][1]),
    ]
    assert tuple(o[0] for o in outputs) == OUTPUT_NAMES
    meta = session.get_modelmeta().custom_metadata_map
    expected = {
        "model_type": "wenet_ctc", "chunk_size": "4", "left_chunks": "2", "head": str(heads),
        "num_blocks": str(blocks), "output_size": str(dim), "cnn_module_kernel": str(kernel),
        "right_context": "6", "subsampling_factor": "4", "vocab_size": str(vocab),
    }  # fmt: skip
    assert {k: meta[k] for k in expected} == expected
    lines = paths["tokens"].read_text().splitlines()
    assert lines == [f"{p} {i}" for i, p in enumerate(tiny_model_file.tokenizer.pieces())]


def test_attn_mask_marks_the_filled_cache(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    """sherpa-onnx's mask (right-aligned valid frames) is what the model reads: marking the
    zero-filled cache valid on the first chunk must change the output."""
    assert sherpa_attn_mask(0, 4, 2).tolist() == [[[False] * 8 + [True] * 4]]
    assert sherpa_attn_mask(1, 4, 2).tolist() == [[[False] * 4 + [True] * 8]]
    assert sherpa_attn_mask(5, 4, 2).all()
    session = _session(export_onnx(tiny_model_file.path, tmp_path, 4, 2)["model"])
    feeds = {i.name: np.zeros(i.shape, np.float32) for i in session.get_inputs()}
    feeds["x"] = np.random.default_rng(0).standard_normal(feeds["x"].shape).astype(np.float32)
    feeds["offset"] = feeds["required_cache_size"] = np.array([8], dtype=np.int64)
    feeds["attn_mask"] = sherpa_attn_mask(0, 4, 2)
    first = session.run(["log_probs"], feeds)[0]
    feeds["attn_mask"] = np.ones_like(feeds["attn_mask"])
    assert np.abs(session.run(["log_probs"], feeds)[0] - first).max() > 1e-3


def test_int8_export(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    paths = export_onnx(tiny_model_file.path, tmp_path, 4, 2, quantize="int8")
    proto = onnx.load(str(paths["model_int8"]))
    ops = {node.op_type for node in proto.graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}, ops
    session = _session(paths["model_int8"])
    meta = session.get_modelmeta().custom_metadata_map
    assert meta["quantize"] == "int8" and meta["model_type"] == "wenet_ctc"
    feats = np.random.default_rng(1).standard_normal((100, 80)).astype(np.float32)
    got = OnnxStreamer(session).accept_features(feats)
    fp32 = OnnxStreamer(_session(paths["model"])).accept_features(feats)
    assert 0 < np.abs(got - fp32).max() < 0.5


@pytest.mark.parametrize(
    "overrides,chunk,left,message",
    [
        ([], 4, -1, "left_chunks must be >= 0"),
        ([], 0, -1, "chunk_size must be > 0"),
        (["features.snip_edges=true"], 4, 2, "snip_edges"),
        (["features.high_freq=0"], 4, 2, "high_freq is 0 .*stop at -400"),
        (["features.frame_shift_ms=20"], 4, 2, "25/10 ms"),
        (["encoder.subsampling_rate=6"], 4, 2, "hard-codes 4"),
    ],
)
def test_refuses_what_sherpa_cannot_run(overrides, chunk: int, left: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_sherpa_compatible(load_config(TINY, overrides), chunk, left)


def test_export_refuses_left_chunks_minus_one(tiny_model_file: ModelFile, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fixed cache"):
        export_onnx(tiny_model_file.path, tmp_path, 4, -1)
    assert not (tmp_path / "model.onnx").exists()


def test_cli_exports_onnx(tiny_model_file: ModelFile, tmp_path: Path, capsys) -> None:
    from wenet_lite.cli import main

    argv = ["export", "--model", str(tiny_model_file.path), "--format", "onnx", "--quantize"]
    argv += ["int8", "--chunk-size", "4", "--left-chunks", "1", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == [
        "batched.onnx", "model.int8.onnx", "model.onnx", "tokenizer.model", "tokens.txt",
        "wenet_lite.json"]  # fmt: skip
    meta = _session(tmp_path / "o" / "model.onnx").get_modelmeta().custom_metadata_map
    assert (meta["chunk_size"], meta["left_chunks"]) == ("4", "1")
    argv[argv.index("1")] = "-1"
    assert main(argv) == 1
    assert "--left-chunks must be >= 0" in capsys.readouterr().err  # the field, as a flag


def test_decoder_onnx_scores_equal_eager(speech_u2_model_file: ModelFile, tmp_path: Path) -> None:
    paths = export_onnx(speech_u2_model_file.path, tmp_path / "u2", 4, 2)
    assert paths["decoder"] == tmp_path / "u2" / "decoder.onnx"
    session = ort.InferenceSession(str(paths["decoder"]), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert meta["decoder"] == "bitransformer" and float(meta["rescore_reverse_weight"]) == 0.3
    decoder = speech_u2_model_file.model.decoder
    gen = torch.Generator().manual_seed(0)
    for n, u, s in ((1, 1, 1), (7, 12, 40), (4, 3, 9)):  # none of them the export's example
        hyps = torch.randint(2, 40, (n, u), generator=gen)
        hyps_lens = torch.randint(1, u + 1, (n,), generator=gen)
        memory = torch.randn(n, s, 32, generator=gen)
        memory_lens = torch.randint(1, s + 1, (n,), generator=gen)
        feeds = [hyps, hyps_lens, memory, memory_lens]
        names = ("hyps", "hyps_lens", "encoder_out", "encoder_lens")
        l2r, r2l = session.run(None, {k: v.numpy() for k, v in zip(names, feeds)})
        with torch.no_grad():
            for reverse, got in ((0.0, l2r), (1.0, r2l)):
                want = decoder.score(memory, memory_lens, hyps, hyps_lens, reverse)
                np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=0)
    # Without a decoder, no decoder.onnx.
    plain = export_onnx(without_decoder(speech_u2_model_file, tmp_path), tmp_path / "plain", 4, 2)
    assert "decoder" not in plain and not (tmp_path / "plain" / "decoder.onnx").exists()
