PYTHON ?= python3

.PHONY: test demo smoke lint bench

test:
	$(PYTHON) -m pytest -q

# Generate a synthetic LibriSpeech-layout corpus, train, decode, stream, export, print results
# (recipes/synthetic/run.sh; 16-25 min measured on 2 CPU cores). Extra recipe flags: make demo ARGS="--stage 5".
demo:
	bash recipes/synthetic/run.sh $(ARGS)

# The same stages on 0.02 h with a tiny model (~1 min): what tests/recipes runs.
smoke:
	SMOKE=1 bash recipes/synthetic/run.sh $(ARGS)

lint:
	ruff check . && ruff format --check .

bench:
	$(PYTHON) tools/bench_encoder.py
