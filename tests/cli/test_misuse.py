"""Everyday mistakes, every subcommand: an exit code, one line on stderr naming the argument or
file, no traceback, and nothing written. (`{m}` is a model file, `{d}` a prepared test set,
`{f}` an existing plain file, `{t}` a fresh directory.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from wenet_lite.cli import main

TINY_CONFIG = Path(__file__).resolve().parents[2] / "conf" / "tiny_test.yaml"

ROWS = [
    # decode
    (["decode", "--model", "{m}", "--data", "{d}", "--out", "{f}/out"], 2, "{f} is a file"),
    (["decode", "--model", "{m}", "--data", "{d}", "--chunk-size", "-1"], 2, "--chunk-size: '-1'"),
    (["decode", "--model", "{m}", "--data", "{d}", "--device", "cuda"], 2, "--device cuda: CUDA"),
    (["decode", "--model", "{m}", "--data", "{d}", "--device", "gpu"], 2, "--device 'gpu'"),
    (["decode", "--model", "{t}", "--data", "{d}", "--out", "{t}/o"], 1, "{t}: is a directory"),
    (["decode", "--model", "{t}/no.pt", "--data", "{d}"], 1, "model file not found: {t}/no.pt"),
    (["decode", "--model", "{m}", "--data", "{d}", "--lm", "x.json"], 2, "needs the prefix beam"),
    (["decode", "--model", "{m}", "--data", "{d}", "--simulate-streaming"], 2, "--chunk-size > 0"),
    (["decode", "--model", "{m}", "--data", "{d}", "--mode", "prefix_beam", "--hotwords",
      "{t}/none.txt", "--out", "{t}/o"], 1, "hotwords file not found: {t}/none.txt"),
    # stream
    (["stream", "--model", "{m}", "--out", "{t}/o", "a.wav"], 2, "--out and --compare need --ref"),
    (["stream", "--model", "{m}"], 2, "give AUDIO files"),
    (["stream", "--model", "{m}", "--chunk-size", "full", "a.wav"], 2, "--chunk-size: 'full'"),
    (["stream", "--model", "{m}", "--device", "cuda", "a.wav"], 2, "--device cuda: CUDA"),
    (["stream", "--model", "{m}", "{t}"], 1, "{t}: is a directory"),
    # serve
    (["serve", "--model", "{t}/no.pt"], 1, "model file not found: {t}/no.pt"),
    (["serve", "--model", "{m}", "--port", "70000"], 2, "error: --port must be in 0..65535"),
    (["serve", "--model", "{m}", "--max-wait-ms", "-1"], 2,
     "error: --max-wait-ms must be in 0..10000 (ms)"),
    (["serve", "--model", "{m}", "--batch-window-ms", "inf"], 2,
     "error: --batch-window-ms must be in 0..10000 (ms)"),
    (["serve", "--model", "{m}", "--batch-window-ms", "nan"], 2,
     "error: --batch-window-ms must be in 0..10000 (ms)"),
    (["serve", "--model", "{m}", "--max-connections", "0"], 2,
     "error: --max-connections must be at least 1, got 0"),
    (["serve", "--model", "{m}", "--chunk-size", "full"], 2, "--chunk-size: 'full'"),
    # score, train-lm
    (["score", "--hyp", "{f}", "--data", "{d}", "--out", "{f}/o"], 2, "{f} is a file"),
    (["score", "--hyp", "{t}/no.txt", "--data", "{d}", "--out", "{t}/o"], 1, "{t}/no.txt"),
    (["train-lm", "--text", "{f}", "--out", "{f}/lm.json"], 2, "{f} is a file"),
    (["train-lm", "--out", "{t}/lm.json"], 2, "give --data and/or --text"),
    # train, export, average, compute-cmvn, prepare
    (["train", "--config", "{f}", "--data", "{d}", "--exp", "{f}"], 2, "--exp: {f} is a file"),
    (["train", "--config", "{t}/empty.yaml", "--data", "{d}", "--exp", "{t}/o"], 2,
     "holds no settings"),
    (["export", "--model", "{m}", "--format", "onnx", "--out", "{f}/x"], 2, "{f} is a file"),
    (["export", "--model", "{m}", "--format", "torchscript", "--chunk-size", "0", "--out",
      "{t}/o.ts"], 2, "--chunk-size: '0'"),
    (["average", "--exp", "{t}/none"], 1, "{t}/none"),
    (["compute-cmvn", "--config", "{f}", "--data", "{d}", "--out", "{f}/c.json"], 2,
     "{f} is a file"),
    (["prepare", "list", "--src", "{t}/none.list", "--out", "{t}/o"], 1, "{t}/none.list"),
    (["prepare", "list", "--src", "{f}", "--out", "{t}/o"], 1, "{f}:1: neither a WeNet"),
    # configs and --set
    (["train", "--config", "{t}/dup.yaml", "--data", "{d}", "--exp", "{t}/o"], 2,
     "model: appears twice (line 3 of {t}/dup.yaml)"),
    (["train", "--config", "{t}/bin.yaml", "--data", "{d}", "--exp", "{t}/o"], 2,
     "{t}/bin.yaml is not UTF-8 text"),
    (["train", "--config", "{c}", "--data", "{d}", "--exp", "{t}/o", "--set", "encoder.nope=1"],
     2, "encoder.nope: unknown key"),
    (["train", "--config", "{c}", "--data", "{d}", "--exp", "{t}/o", "--set",
      "encoder.d_model=abc"], 2, "encoder.d_model: must be an integer"),
    (["train", "--config", "{c}", "--data", "{d}", "--exp", "{t}/o", "--set", "encoder"], 2,
     "not of the form key.path=value"),
    # files that are not what they should be, numbers out of range
    (["decode", "--model", "{f}", "--data", "{d}", "--out", "{t}/o"], 1,
     "{f}: not a model file"),
    (["decode", "--model", "{m}", "--data", "{t}/none", "--out", "{t}/o"], 1, "{t}/none"),
    (["serve", "--model", "{m}", "--upload-context", "whole"], 2,
     "argument --upload-context: invalid choice: 'whole'"),
    (["serve", "--model", "{m}", "--device", "cuda", "--jobs", "2"], 2,
     "--device cuda: CUDA is not available here"),
    (["stream", "--model", "{m}", "--sample-rate", "0", "-"], 2, "--sample-rate: '0'"),
    (["stream", "--model", "{m}", "--max-streams", "0", "a.wav"], 2, "--max-streams: '0'"),
    (["export", "--model", "{m}", "--format", "onnx", "--chunk-size", "4", "--left-chunks",
      "-2", "--out", "{t}/o"], 2, "left chunks must be -1"),
    (["average", "--exp", "{t}"], 1, "{t}: no step_N.pt checkpoints"),
    (["prepare", "shards", "--data", "{d}", "--part", "p", "--shard-size", "0", "--out",
      "{t}/o"], 2, "--shard-size must be at least 1, got 0"),
    (["prepare", "shards", "--data", "{d}", "--part", "p", "--shard-mb", "-1", "--out",
      "{t}/o"], 2, "--shard-mb must be > 0, got -1.0"),
    (["compute-cmvn", "--config", "{c}", "--data", "{t}/none", "--out", "{t}/c.json"], 1,
     "{t}/none"),
    (["score", "--hyp", "{f}", "--data", "{t}/none", "--out", "{t}/o"], 1, "{t}/none"),
    (["train-lm", "--data", "{t}/none", "--out", "{t}/lm.json"], 1, "{t}/none"),
]  # fmt: skip


@pytest.mark.parametrize("argv, code, words", ROWS, ids=[" ".join(r[0][:3]) for r in ROWS])
def test_misuse_is_one_line(tiny, corpus: Path, tmp_path: Path, capsys, argv, code, words):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("CUDA is here: --device cuda is refused only where it is missing")
    plain = tmp_path / "plain.txt"
    plain.write_text("x\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "dup.yaml").write_text("model:\n  d_model: 4\nmodel:\n  d_model: 8\n")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    fill = {"m": str(tiny.path), "d": str(corpus / "test-clean"), "f": str(plain),
            "t": str(tmp_path), "c": str(TINY_CONFIG)}  # fmt: skip
    before = sorted(tmp_path.rglob("*"))
    assert main([a.format(**fill) for a in argv]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words.format(**fill) in err, err
    assert "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_integer_samples_are_refused(tiny) -> None:
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer

    stream = open_recognizer(tiny.path, Chunking(4)).create_stream()
    with pytest.raises(ValueError, match="got int16: divide 16-bit PCM by 32768"):
        stream.accept_waveform(16000, np.zeros(160, np.int16))
    stream.accept_waveform(16000, np.zeros(160, np.float32))  # floats are fine


def test_a_stream_that_fails_midway_first_gives_the_text_before(
    tiny, test_audio, tmp_path: Path, capsys
) -> None:
    """NaN in the middle of a file: the final text of the audio before it, then the error
    (before, that audio's text was lost). The blocks before the bad one are what was heard."""
    import json

    import soundfile as sf

    audio = np.concatenate([test_audio[0], test_audio[1]]).astype(np.float32)
    block = 4 * 4 * 160  # `stream` reads files a chunk at a time: chunk 4 x 4 x 10 ms
    bad_at = len(test_audio[0]) + 100
    heard = audio[: bad_at // block * block]
    broken = audio.copy()
    broken[bad_at] = np.nan
    sf.write(tmp_path / "broken.wav", broken, 16000, subtype="FLOAT")
    sf.write(tmp_path / "heard.wav", heard, 16000, subtype="FLOAT")
    args = ["stream", "--model", str(tiny.path), "--chunk-size", "4", "--json", "--no-endpoint"]
    assert main([*args, str(tmp_path / "heard.wav")]) == 0
    expected = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert main([*args, str(tmp_path / "broken.wav")]) == 1
    captured = capsys.readouterr()
    lines = [json.loads(x) for x in captured.out.splitlines()]
    kinds = [line["type"] for line in lines if line["type"] != "partial"]
    assert kinds == ["final", "error", "summary"]
    final = next(line for line in lines if line["type"] == "final")
    want = next(line for line in expected if line["type"] == "final")
    assert final["text"] and final["text"] == want["text"]
    assert "non-finite" in captured.err and captured.err.count("\n") == 1
