# The verbs of the project. Every target sets up what it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DMQ    := $(VENV)/bin/dropboxmq
STAMP  := $(VENV)/.installed

# Debian packages the fault-injection, power-loss and database tests need (CI is root).
APT_PACKAGES ?= fiu-utils libfiu-dev python3-fiu xfsprogs postgresql

.PHONY: setup system-deps run test spec spec-deep bench clean

setup: $(STAMP)

system-deps:        ## Debian packages (root); skipped when all are present
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

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
