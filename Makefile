# Two commands from a fresh clone: `make demo` and `make test`. Each creates .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench soak install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/workhorse demo

test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/run.py

# Chaos soak (not part of `make test`): 10 minutes by default; CI runs SOAK_ARGS="--seconds 60 --flow"
# (flow control declared and durable steps in the mix).
SOAK_ARGS ?=
soak: $(STAMP)
	$(BIN)/python -m soak.run $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
