# The verbs of the project. Every target sets up what it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DMQ    := $(VENV)/bin/dropboxmq
STAMP  := $(VENV)/.installed

.PHONY: setup run test spec spec-deep bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

run: setup          ## the main job on the embedded default
	$(DMQ) demo --root ./var/dropbox

test: setup         ## the whole suite, in parallel
	$(PY) -m pytest -n auto

spec: setup         ## SANY + TLC: CI models, mutants, witnesses
	$(DMQ) spec check

spec-deep: setup
	$(DMQ) spec check --deep

bench: setup
	$(PY) -m dropboxmq.stress.bench

clean:
	rm -rf $(VENV) var reports .pytest_cache
