"""Numbers as digits (the itn extra): spoken-number sentences (cardinals, money, ordinals,
times) written as expected, each written word with the first and last spoken word it came
from, so its times run from the first's start to the last's end and its confidence is theirs;
in the offline results (every format), a stream's finals and the Python API; the control: the
same words without ITN stay spoken."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

wetext = pytest.importorskip("wetext", reason="the itn extra (wetext) is not installed")

from wenet_lite.itn.normalizer import Itn, Span  # noqa: E402
from wenet_lite.runtime.result import Result, Word, normalized  # noqa: E402
from wenet_lite.search.ctc_search import Hypothesis  # noqa: E402

CASES = [  # spoken (as a recogniser writes it), written
    ("I PAID TWENTY THREE DOLLARS", "I PAID $23"),
    ("ONE HUNDRED AND TWENTY APPLES", "120 APPLES"),
    ("THE FIRST TIME", "THE 1ST TIME"),
    ("CALL ME AT FIVE THIRTY P M", "CALL ME AT 05:30 P.M."),
    ("HELLO WORLD", "HELLO WORLD"),
]


@pytest.fixture(scope="module")
def itn() -> Itn:
    return Itn()


@pytest.mark.parametrize("spoken, written", CASES)
def test_spoken_numbers_are_written_as_digits(itn, spoken, written) -> None:
    words = spoken.split()
    spans = itn.spans(words)
    assert " ".join(s.text for s in spans) == written
    assert [s.first for s in spans] == sorted(s.first for s in spans)
    for s in spans:  # every written word names spoken words it came from
        assert 0 <= s.first <= s.last < len(words)
    covered = sorted({i for s in spans for i in range(s.first, s.last + 1)})
    assert covered == list(range(len(words)))  # no spoken word lost


def test_punctuated_words_keep_their_mark_and_capital(itn) -> None:
    spans = itn.spans(["I", "paid", "twenty", "three", "dollars.", "Twenty", "one", "came."])
    assert [s.text for s in spans] == ["I", "paid", "$23.", "21", "came."]  # not "$23.21"
    assert spans[2] == Span(2, 4, "$23.")


def _result(words) -> Result:
    ws = [Word(t, 0.5 * i, 0.5 * i + 0.4, False, 0.9 - 0.1 * i) for i, t in enumerate(words)]
    return Result(" ".join(words), [], [], [], ws, True, 0.0, 0.5 * len(words), 0.8)


def test_a_written_word_takes_the_times_and_confidence_of_its_spoken_words(itn) -> None:
    result = normalized(_result(["I", "PAID", "TWENTY", "THREE", "DOLLARS"]), itn)
    assert result.text == "I PAID $23"
    money = result.words[2]
    assert (money.text, money.start, money.end) == ("$23", 1.0, 2.4)  # TWENTY .. DOLLARS
    assert money.confidence == pytest.approx(0.5)  # the lowest of the three (0.7, 0.6, 0.5)
    assert normalized(_result(["I", "PAID"]), None).text == "I PAID"  # no stage: as it was


def _spoken_hypothesis(tokenizer, text: str) -> Hypothesis:
    ids = tokenizer.encode(text)
    return Hypothesis(ids, -1.0, [3 * k for k in range(len(ids))], 0.9)


def test_offline_results_and_every_format_are_written(tiny, tmp_path) -> None:
    from wenet_lite.recognizer import open_offline
    from wenet_lite.transcript import format_transcript, pauses_transcript

    triple = (tiny.model, tiny.tokenizer, tiny.cfg)
    hyp = _spoken_hypothesis(tiny.tokenizer, "I PAID TWENTY THREE DOLLARS")
    plain = open_offline(triple).result(hyp)
    written = open_offline(triple, itn=True).result(hyp)
    assert plain.text == "I PAID TWENTY THREE DOLLARS"  # the control
    assert written.text == "I PAID $23"
    money = written.words[2]
    spoken = {w.text: w for w in plain.words}
    assert money.start == spoken["TWENTY"].start and money.end == spoken["DOLLARS"].end
    transcript = pauses_transcript("x.wav", [written], 10.0, 10.0)
    as_json = json.loads(format_transcript(transcript, "json"))
    assert [w["word"] for w in as_json["segments"][0]["words"]][2] == "$23"
    for fmt in ("srt", "vtt", "tsv", "txt"):
        assert "$23" in format_transcript(transcript, fmt), fmt


def test_a_streams_finals_are_written_its_partials_spoken(tiny) -> None:
    """A search that always finds the same spoken words: the stream's partial result stays
    spoken, its final (closed at the end of input) is written."""
    import numpy as np

    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, make_engine
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.runtime.streaming import StreamingRecognizer

    hyp = _spoken_hypothesis(tiny.tokenizer, "TWENTY THREE DOLLARS")

    class Saying:
        needs_encoder = False
        trailing_blanks = 0

        def hypotheses(self, nbest: int = 1):
            return [hyp]

    class SaysNumbers:
        needs_encoder = False

        def new_state(self, context=None):
            return Saying()

        def step(self, chunk, states):
            return list(states)

    engine = make_engine(EngineSpec(precision="fp32"), tiny.model, Chunking(4, -1))
    rec = StreamingRecognizer(engine, tiny.cfg, tiny.tokenizer, search=SaysNumbers(),
                              endpoint=EndpointConfig(enabled=False), itn=Itn())  # fmt: skip
    stream = rec.create_stream()
    stream.accept_waveform(16000, np.zeros(16000, np.float32))
    rec.decode_until_done([stream])
    assert stream.partial_result().text == "TWENTY THREE DOLLARS"
    stream.input_finished()
    rec.decode_until_done([stream])
    assert [r.text for r in stream.final_results] == ["$23"]


def test_the_cli_says_what_to_install_without_it(tiny, tmp_path) -> None:
    import numpy as np
    import soundfile as sf

    shadow = tmp_path / "shadow" / "wetext"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    audio = tmp_path / "a.wav"
    sf.write(audio, np.zeros(16000, np.float32), 16000)
    run = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "transcribe", "--model", str(tiny.path), "--itn",
         str(audio)], capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path / "shadow"),
                                                          "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "pip install 'wenet_lite[itn]'" in run.stderr
