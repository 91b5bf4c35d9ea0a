# Two commands from a fresh clone: `make demo` and `make test`. Each creates .venv itself, and
# installs only what it needs: the demo, workhorse with its embedded PostgreSQL (the `embedded`
# extra); the tests, the development extras (linters, type checker, browser driver, Django, ...).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint bench soak install clean docs

$(BIN)/python:
	@echo "make: creating a virtual environment in $(VENV) ($(PYTHON) -m venv)"
	$(PYTHON) -m venv $(VENV)
	@echo "make: upgrading pip in $(VENV)"
	$(BIN)/pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing workhorse and its embedded PostgreSQL (pgserver), what the demo needs:" \
		"pip install -e '.[embedded]' (a minute or so on a first run)"
	$(BIN)/pip install --quiet -e '.[embedded]'
	@touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing workhorse with the development extras (pytest, ruff, mypy, Playwright, Django," \
		"SQLAlchemy, ...): pip install -e '.[dev]' (a few minutes on a first run)"
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(DEMO_STAMP)  # the dev extras include the embedded one

install: $(DEV_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/workhorse demo

test: $(DEV_STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/pytest -n 2 --dist worksteal -q

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

# The documentation site (mkdocs.yml, sources in docs/) built into site/ with --strict: a broken
# link or anchor, an API name that no longer resolves, or a CLI reference that fails is an error.
# Offline: nothing is fetched at build time. Serve it locally with `.venv/bin/mkdocs serve`.
docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(DEV_STAMP)
	$(BIN)/python bench/run.py

# Chaos soak (not part of `make test`): 10 minutes by default; CI runs SOAK_ARGS="--seconds 60 --flow"
# (flow control declared and durable steps in the mix).
SOAK_ARGS ?=
soak: $(DEV_STAMP)
	$(BIN)/python -m soak.run $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
