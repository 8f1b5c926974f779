"""`wenet-lite decode` and `wenet-lite stream` end to end: they agree with each other, on any
sample rate and channel count, from files and from stdin, and report bad inputs."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import soxr

from wenet_lite.cli import main
from wenet_lite.cli.stream_files import stream_inputs
from wenet_lite.data.manifest import load_cuts, prepare_cuts
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig


def _hyps(out: Path) -> Dict[str, str]:
    lines = (out / "hyp.txt").read_text().splitlines()
    return {utt: text for utt, _, text in (line.partition(" ") for line in lines)}


def _finals(stdout: str) -> Dict[str, List[dict]]:
    finals: Dict[str, List[dict]] = {}
    for line in stdout.splitlines():
        obj = json.loads(line)
        if obj["type"] == "final":
            finals.setdefault(obj["file"], []).append(obj)
    return finals


@pytest.fixture(scope="module")
def mixed_rates(corpus: Path, test_audio, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three utterances: 16 kHz mono WAV, 44.1 kHz stereo FLAC, 22.05 kHz mono FLAC, with cuts."""
    folder = tmp_path_factory.mktemp("rates")
    texts = [c.supervisions[0].text for c in load_cuts(corpus / "test-clean")]
    sf.write(folder / "a.wav", test_audio[1], 16000)
    stereo = np.stack([test_audio[2], 0.3 * test_audio[2]], 1)
    sf.write(folder / "b.flac", soxr.resample(stereo, 16000, 44100), 44100)
    sf.write(folder / "c.flac", soxr.resample(test_audio[3], 16000, 22050), 22050)
    with open(folder / "data.list", "w") as f:
        for name, text in zip("abc", texts[1:4]):
            path = folder / (name + (".wav" if name == "a" else ".flac"))
            f.write(json.dumps({"key": name, "wav": str(path), "txt": text}) + "\n")
    prepare_cuts(folder / "data.list", folder / "data")
    return folder


def test_stream_equals_decode_at_any_rate(mixed_rates: Path, tiny, tmp_path: Path, capsys) -> None:
    chunking = ["--chunk-size", "4", "--left-chunks", "2"]
    hyps = []
    for extra in (["--simulate-streaming"], []):
        out = tmp_path / f"out{len(hyps)}"
        args = ["decode", "--model", str(tiny.path), "--data", str(mixed_rates / "data")]
        assert main([*args, *chunking, *extra, "--out", str(out)]) == 0
        hyps.append(_hyps(out))
    files = {k: str(mixed_rates / f"{k}.{'wav' if k == 'a' else 'flac'}") for k in "abc"}
    for max_streams in ("1", "3"):
        capsys.readouterr()
        args = ["stream", "--model", str(tiny.path), *chunking, "--json", "--no-endpoint"]
        assert main([*args, "--max-streams", max_streams, *files.values()]) == 0
        finals = _finals(capsys.readouterr().out)
        streamed = {k: " ".join(f["text"] for f in finals[path]) for k, path in files.items()}
        assert all(streamed.values()) and streamed == hyps[0] == hyps[1]


def test_stream_ref_scores_a_set_like_decode(mixed_rates: Path, tiny, tmp_path: Path) -> None:
    """`stream --ref` streams the set's audio, names each file by its cut (ids here are not
    file names) and writes decode's four files; `score` reads stream's JSON lines too."""
    with open(tmp_path / "data.list", "w") as f:
        for key, cut in zip(("utt-x", "utt-y", "utt-z"), load_cuts(mixed_rates / "data")):
            audio = cut.recording.sources[0].source
            f.write(json.dumps({"key": key, "wav": audio, "txt": cut.supervisions[0].text}) + "\n")
    prepare_cuts(tmp_path / "data.list", tmp_path / "data")
    model, data = ["--model", str(tiny.path)], ["--data", str(tmp_path / "data")]
    chunking = ["--chunk-size", "4", "--left-chunks", "2"]
    sim = tmp_path / "sim"
    assert (
        main(["decode", *model, *data, *chunking, "--simulate-streaming", "--out", str(sim)]) == 0
    )
    out = tmp_path / "streamed"
    ref = ["--ref", str(tmp_path / "data"), "--out", str(out), "--compare", str(sim)]
    with open(tmp_path / "s.jsonl", "w") as stdout, contextlib.redirect_stdout(stdout):
        assert main(["stream", *model, *chunking, "--no-endpoint", "--json", *ref]) == 0
    record, simulated = (json.loads((d / "summary.json").read_text()) for d in (out, sim))
    assert _hyps(out) == _hyps(sim) and sorted(_hyps(out)) == ["utt-x", "utt-y", "utt-z"]
    assert record["identical"] == {"to": str(sim / "hyp.txt"), "same": 3, "compared": 3,
                                   "differ": []}  # fmt: skip
    assert record["wer"] == simulated["wer"] and record["cer"] == simulated["cer"]
    settings = record["settings"]
    assert settings["chunking"] == {"chunk_size": 4, "left_chunks": 2}
    assert settings["search"] == simulated["settings"]["search"]
    assert not settings["endpoint"]["enabled"] and settings["inputs"] == 3
    # score: the JSON lines of the same stream give the same numbers and settings.
    scored = tmp_path / "scored"
    assert main(["score", "--hyp", str(tmp_path / "s.jsonl"), *data, "--out", str(scored)]) == 0
    again = json.loads((scored / "summary.json").read_text())
    assert again["wer"] == record["wer"] and again["settings"]["search"] == settings["search"]


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["stream", "--model", "M.pt", "--out", "x", "a.wav"], 2, "--out and --compare need --ref"),
        (["stream", "--model", "M.pt"], 2, "give AUDIO files"),
        (["score", "--hyp", "{tmp}/nope.txt", "--data", "{data}", "--out", "{tmp}/o"], 1,
         "transcript file not found: {tmp}/nope.txt"),
        (["score", "--hyp", "{tmp}/alien.txt", "--data", "{data}", "--out", "{tmp}/o"], 1,
         "transcript(s) of utterances not in the references: ['alien-1']"),
        (["score", "--hyp", "{tmp}/bad.jsonl", "--data", "{data}", "--out", "{tmp}/o"], 1,
         "{tmp}/bad.jsonl:2: not a JSON line of `wenet-lite stream`"),
        (["score", "--hyp", "{tmp}/empty.txt", "--data", "{data}", "--out", "{tmp}/o"], 1,
         "{tmp}/empty.txt: no transcripts in it"),
        (["score", "--hyp", "{tmp}/latin1.txt", "--data", "{data}", "--out", "{tmp}/o"], 1,
         "{tmp}/latin1.txt: not UTF-8 text (byte 0xe9"),
        (["train-lm", "--text", "{tmp}/latin1.txt", "--out", "{tmp}/lm.json"], 1,
         "{tmp}/latin1.txt: not UTF-8 text (byte 0xe9"),
        (["train-lm", "--out", "{tmp}/lm.json"], 2, "give --data and/or --text"),
        (["train-lm", "--text", "{tmp}/nope.txt", "--out", "{tmp}/lm.json"], 1,
         "text file not found: {tmp}/nope.txt"),
    ],
)  # fmt: skip
def test_score_stream_and_train_lm_misuse_is_one_line(
    corpus: Path, tmp_path: Path, capsys, args: List[str], code: int, words: str
) -> None:
    (tmp_path / "alien.txt").write_text("alien-1 HELLO\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes(b"a-1 CAF\xe9\n")
    (tmp_path / "bad.jsonl").write_text(
        '{"type": "final", "file": "a", "segment": 0, "text": ""}\n{oops\n'
    )
    fill = {"tmp": str(tmp_path), "data": str(corpus / "test-clean")}
    assert main([a.format(**fill) for a in args]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words.format(**fill) in err, err
    assert not (tmp_path / "o").exists()


def test_decode_prefix_beam_one_equals_greedy(corpus: Path, tiny, tmp_path: Path) -> None:
    args = ["decode", "--model", str(tiny.path), "--data", str(corpus / "test-clean")]
    assert main([*args, "--out", str(tmp_path / "greedy")]) == 0
    beam = ["--mode", "prefix_beam", "--beam", "1", "--out", str(tmp_path / "beam")]
    assert main([*args, *beam]) == 0
    greedy = _hyps(tmp_path / "greedy")
    assert all(greedy.values()) and _hyps(tmp_path / "beam") == greedy


def test_decode_with_a_word_lm(corpus: Path, tiny, tmp_path: Path, capsys) -> None:
    """An LM trained on the test transcripts themselves (only for this test) must pull the
    hypotheses towards them, read from JSON or ARPA alike; weight, bonus and oov penalty 0
    change nothing; greedy + LM is refused."""
    from wenet_lite.data.manifest import cut_text
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.search.lm import WordLM

    data = corpus / "test-clean"
    word_lm = WordLM.train(normalize_text(cut_text(c)) for c in load_cuts(data))
    word_lm.save(tmp_path / "lm.json")
    args = ["decode", "--model", str(tiny.path), "--data", str(data), "--mode", "prefix_beam"]
    lm = ["--lm", str(tmp_path / "lm.json")]
    assert main([*args, "--out", str(tmp_path / "beam")]) == 0
    zero = ["--lm-weight", "0", "--word-bonus", "0", "--oov-penalty", "0"]
    assert main([*args, *lm, *zero, "--out", str(tmp_path / "w0")]) == 0
    assert _hyps(tmp_path / "w0") == _hyps(tmp_path / "beam")
    assert main([*args, *lm, "--lm-weight", "2", "--out", str(tmp_path / "lm")]) == 0

    def wer(out: str) -> float:
        line = (tmp_path / out / "summary.txt").read_text().split("WER ")[1]
        return float(line.split(" %")[0])

    assert wer("lm") < wer("beam"), (wer("lm"), wer("beam"))
    # The same LM as an ARPA file gives the same transcripts.
    arpa = ["--lm", str(word_lm.save_arpa(tmp_path / "lm.arpa.gz"))]
    assert main([*args, *arpa, "--lm-weight", "2", "--out", str(tmp_path / "arpa")]) == 0
    assert _hyps(tmp_path / "arpa") == _hyps(tmp_path / "lm")
    assert "word bonus 2.5, oov penalty 3.0)" in (tmp_path / "lm" / "summary.txt").read_text()
    penalties = ["--oov-penalty", "0", "--blank-penalty", "0.5", "--out", str(tmp_path / "pen")]
    assert main([*args, *lm, "--lm-weight", "2", *penalties]) == 0
    assert _hyps(tmp_path / "pen") != _hyps(tmp_path / "lm")
    assert "blank penalty 0.5 + LM" in (tmp_path / "pen" / "summary.txt").read_text()
    assert "word bonus 2.5)" in (tmp_path / "pen" / "summary.txt").read_text()
    capsys.readouterr()
    assert main(["decode", "--model", str(tiny.path), "--data", str(data), *lm]) == 2
    assert "needs the prefix beam (--mode prefix_beam or" in capsys.readouterr().err


def test_stream_bad_inputs_named_others_decoded(
    bad_audio: Dict[str, Path], mixed_rates: Path, tiny, capsys
) -> None:
    good = str(mixed_rates / "a.wav")
    inputs = [str(p) for p in bad_audio.values()]
    args = ["stream", "--model", str(tiny.path), "--chunk-size", "4", "--json"]
    assert main([*args, inputs[0], good, *inputs[1:]]) == 1
    captured = capsys.readouterr()
    errors = [json.loads(x) for x in captured.out.splitlines() if '"error"' in x]
    assert sorted(e["file"] for e in errors) == sorted(inputs)
    for path in inputs:
        assert f"wenet-lite stream: error: {path}: " in captured.err
    assert _finals(captured.out)[good][0]["text"]


def test_decode_bad_audio_exit_code(mixed_rates: Path, bad_audio, tiny, tmp_path: Path, capsys):
    good, broken = tmp_path / "good.wav", tmp_path / "broken.flac"
    good.write_bytes((mixed_rates / "a.wav").read_bytes())
    broken.write_bytes((mixed_rates / "b.flac").read_bytes())
    with open(tmp_path / "data.list", "w") as f:
        for key, path in (("good", good), ("broken", broken)):
            f.write(json.dumps({"key": key, "wav": str(path), "txt": "A B"}) + "\n")
    prepare_cuts(tmp_path / "data.list", tmp_path / "data")
    broken.write_bytes(bad_audio["corrupt_flac"].read_bytes())  # prepare skips unreadable files
    out = tmp_path / "out"
    args = [
        "decode",
        "--model",
        str(tiny.path),
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(out),
    ]
    assert main(args) == 1
    assert f"broken: {broken}: cannot decode audio" in capsys.readouterr().err
    assert list(_hyps(out)) == ["good"]


def test_stream_text_output(mixed_rates: Path, tiny, capsys) -> None:
    path = str(mixed_rates / "a.wav")
    assert main(["stream", "--model", str(tiny.path), "--chunk-size", "4", path]) == 0
    captured = capsys.readouterr()
    partials = [x for x in captured.err.splitlines() if x.startswith(f"{path} ... ")]
    assert len(partials) >= 2  # shown as they change
    first, words = captured.out.splitlines()[:2]
    assert first.startswith(f"{path} 0.00-") and partials[-1].endswith(first.split(" ", 2)[2])
    assert words.startswith("    ") and words.split()[1].count("-") == 1


def test_stream_stdin_pcm_equals_file(mixed_rates: Path, tiny) -> None:
    """`arecord -t raw ... | wenet-lite stream --model M --raw 16000 -`, with the console
    script's real stdin."""
    path = mixed_rates / "a.wav"
    pcm = sf.read(path, dtype="int16")[0].astype("<i2").tobytes()
    cmd = [sys.executable, "-m", "wenet_lite", "stream", "--model", str(tiny.path)]
    cmd += ["--chunk-size", "4", "--json", "--no-endpoint", "--raw", "16000", "-", str(path)]
    proc = subprocess.run(cmd, input=pcm, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    finals = _finals(proc.stdout.decode())
    assert finals["-"][0]["text"] and finals["-"] == [dict(f, file="-") for f in finals[str(path)]]


def test_full_context_model_cannot_stream(corpus: Path, full_context_model: Path, capsys) -> None:
    data = str(corpus / "test-clean")
    sim = ["--chunk-size", "4", "--simulate-streaming"]
    assert main(["decode", "--model", str(full_context_model), "--data", data, *sim]) == 1
    assert main(["stream", "--model", str(full_context_model), "x.wav"]) == 1
    err = capsys.readouterr().err
    assert err.count(f"{full_context_model} was trained full-context") == 2


class _PipeThenCtrlC(io.RawIOBase):
    """stdin of a live session: PCM, then the user presses Ctrl-C."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        if self.pos >= len(self.data):
            raise KeyboardInterrupt
        piece = self.data[self.pos : self.pos + n]
        self.pos += len(piece)
        return piece


def test_ctrl_c_finishes_live_input(mixed_rates: Path, tiny, tmp_path: Path) -> None:
    """What arrived before Ctrl-C is decoded and printed (whole 100 ms blocks: a block being
    read when the interrupt comes is lost)."""
    samples = sf.read(mixed_rates / "a.wav", dtype="int16")[0]
    samples = samples[: len(samples) // 1600 * 1600]
    sf.write(tmp_path / "a.wav", samples, 16000)
    rec = open_recognizer(tiny.path, Chunking(4), endpoint=EndpointConfig(enabled=False))
    out, live = io.StringIO(), io.StringIO()
    assert stream_inputs(rec, [str(tmp_path / "a.wav")], json_lines=True, out=out).failed == 0
    pipe = _PipeThenCtrlC(samples.astype("<i2").tobytes())
    with pytest.raises(KeyboardInterrupt):
        stream_inputs(
            rec, ["-"], json_lines=True, out=live, err=io.StringIO(), stdin=pipe, raw_rate=16000
        )
    final = _finals(live.getvalue())["-"]
    expected = _finals(out.getvalue())[str(tmp_path / "a.wav")]
    assert final[0]["text"] and final == [dict(f, file="-") for f in expected]


def test_stdin_is_read_by_its_header(mixed_rates: Path, tiny, tmp_path: Path) -> None:
    """A WAV (16-bit, or another encoding), a FLAC and stereo 44.1 kHz piped to `stream -`
    give the file's own finals; headerless bytes need --raw RATE and are refused without it;
    with it they are PCM at that rate."""
    rec = open_recognizer(tiny.path, Chunking(4), endpoint=EndpointConfig(enabled=False))
    samples = sf.read(mixed_rates / "a.wav", dtype="int16")[0]
    wav16, wav_float = tmp_path / "a16.wav", tmp_path / "afloat.wav"
    sf.write(wav16, samples, 16000, subtype="PCM_16")
    sf.write(wav_float, samples / 32768.0, 16000, subtype="FLOAT")
    finals = {}
    for path in (wav16, wav_float, mixed_rates / "b.flac"):
        by_file, piped = io.StringIO(), io.StringIO()
        assert stream_inputs(rec, [str(path)], json_lines=True, out=by_file).failed == 0
        pipe = io.BytesIO(path.read_bytes())
        assert stream_inputs(rec, ["-"], json_lines=True, out=piped, stdin=pipe).failed == 0
        expected = _finals(by_file.getvalue())[str(path)]
        finals[path] = _finals(piped.getvalue())["-"]
        assert expected[0]["text"] and finals[path] == [dict(f, file="-") for f in expected]
    # As arecord writes to a pipe: the sizes left open (it cannot seek back to fill them in).
    data = bytearray(wav16.read_bytes())
    at = data.index(b"data")
    data[4:8] = data[at + 4 : at + 8] = (0xFFFFFFFF).to_bytes(4, "little")
    live = io.StringIO()
    stream_inputs(rec, ["-"], json_lines=True, out=live, stdin=io.BytesIO(bytes(data)))
    assert _finals(live.getvalue())["-"] == finals[wav16]
    raw = samples.astype("<i2").tobytes()
    err = io.StringIO()
    report = stream_inputs(rec, ["-"], out=io.StringIO(), err=err, stdin=io.BytesIO(raw))
    assert report.failed == 1 and "-: no WAV, FLAC or OGG header" in err.getvalue()
    assert "--raw RATE" in err.getvalue()
    by_raw = io.StringIO()
    stream_inputs(rec, ["-"], json_lines=True, out=by_raw, stdin=io.BytesIO(raw), raw_rate=16000)
    assert _finals(by_raw.getvalue())["-"] == finals[wav16]


def test_cat_a_wav_into_stream_equals_the_file(mixed_rates: Path, tiny) -> None:
    """`cat a.wav | wenet-lite stream -` in a real pipe: the file's transcript."""
    model = ["--model", str(tiny.path), "--chunk-size", "4", "--no-endpoint"]
    cmd = [sys.executable, "-m", "wenet_lite", "stream", *model]
    wav = mixed_rates / "a.wav"
    by_file = subprocess.run([*cmd, str(wav)], capture_output=True, text=True, timeout=300)
    with open(wav, "rb") as f:
        piped = subprocess.run([*cmd, "-"], stdin=f, capture_output=True, text=True, timeout=300)
    assert by_file.returncode == piped.returncode == 0, piped.stderr
    first = by_file.stdout.splitlines()[0].split(" ", 2)
    assert len(first) == 3 and first[2]
    assert piped.stdout.splitlines()[0].split(" ", 2)[1:] == first[1:]
