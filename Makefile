PYTHON ?= python3

.PHONY: test lint bench

test:
	$(PYTHON) -m pytest -q

lint:
	ruff check . && ruff format --check .

bench:
	$(PYTHON) tools/bench_encoder.py
