"""Word confidence calibration: the ROC area of "this word is right" scored by confidence,
against hand-computed cases, and on a decoded set's summary."""

from __future__ import annotations

import json

from wenet_lite.evaluation.wer import align_tokens, confidence_auc, words_right


def test_the_area_under_the_roc_curve_by_hand() -> None:
    assert confidence_auc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert confidence_auc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert confidence_auc([0.5, 0.5, 0.5], [True, False, True]) == 0.5  # ties count half
    # 2 right x 2 wrong pairs: (0.9 > 0.7), (0.9 > 0.3), (0.4 < 0.7), (0.4 > 0.3): 3 of 4
    assert confidence_auc([0.9, 0.7, 0.4, 0.3], [True, False, True, False]) == 0.75
    assert confidence_auc([0.9, 0.8], [True, True]) is None
    assert confidence_auc([], []) is None


def test_each_hypothesis_word_is_right_or_wrong() -> None:
    alignment = align_tokens("A B C D".split(), "A X C C D E".split())
    assert words_right(alignment) == [True, False, True, False, True, False]
    assert len(words_right(alignment)) == 6  # one flag per hypothesis word


def test_a_decoded_sets_summary_reports_it(tiny, corpus, tmp_path) -> None:
    import subprocess
    import sys

    out = tmp_path / "decoded"
    got = subprocess.run([sys.executable, "-m", "wenet_lite", "decode", "--model", str(tiny.path),
                          "--data", str(corpus / "test-clean"), "--out", str(out)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    line = next(x for x in (out / "summary.txt").read_text().splitlines()
                if x.startswith("word confidence AUC"))  # fmt: skip
    record = json.loads((out / "summary.json").read_text())
    auc = record["word_confidence_auc"]
    assert auc is None or 0.0 <= auc <= 1.0
    assert (f"{auc:.3f}" if auc is not None else "-") in line and "right " in line
