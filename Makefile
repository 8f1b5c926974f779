# The Python: PYTHON=... if given, else the active virtual environment, else .venv in this
# checkout, which `make setup` creates. Every target but setup runs with that environment's
# scripts first on PATH (the recipes call `wenet-lite` and `python3`).
ifdef PYTHON
PY := $(PYTHON)
else ifdef VIRTUAL_ENV
PY := $(VIRTUAL_ENV)/bin/python
else
PY := $(CURDIR)/.venv/bin/python
endif
WITH_ENV = PATH="$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$$PATH"

.PHONY: setup test demo smoke lint bench docs

# Install what is missing (apt packages, .venv, torch's CPU wheel, wenet_lite[dev]); a second
# run checks and returns in about a second. See tools/setup.sh.
setup:
	@PYTHON="$(PYTHON)" bash tools/setup.sh

test: setup
	@$(PY) -c "import platform, torch; print(f'test: Python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.cuda.is_available()}')"
	$(WITH_ENV) $(PY) -m pytest -q -n auto

# Generate a synthetic LibriSpeech-layout corpus, train, decode, stream, export, print results
# (recipes/synthetic/run.sh; 15-25 min measured on 2 CPU cores). Extra recipe flags: make demo ARGS="--stage 5".
demo: setup
	$(WITH_ENV) bash recipes/synthetic/run.sh $(ARGS)

# The same stages on 0.02 h with a tiny model (~1 min): what tests/recipes runs.
smoke: setup
	$(WITH_ENV) SMOKE=1 bash recipes/synthetic/run.sh $(ARGS)

lint: setup
	$(WITH_ENV) ruff check . && $(WITH_ENV) ruff format --check .

# The docs site (MkDocs, Material theme) into site/; `mkdocs serve` to browse while editing.
docs: setup
	$(WITH_ENV) NO_MKDOCS_2_WARNING=1 mkdocs build --strict

bench: setup
	$(WITH_ENV) $(PY) benchmarks/bench_encoder.py
