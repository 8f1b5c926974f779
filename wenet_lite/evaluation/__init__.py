"""Evaluation: recognise a prepared set (``decode``), score hypotheses against references, and
the WER/CER arithmetic with its alignment details."""
