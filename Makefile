# The two commands of the README: `make up` runs Cairn, `make test` passes the tests.
# Both create the virtual environment first when it is missing.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install up down status test test-unit compose-config clean

install: $(STAMP)

# torch is pinned inside the retrieval group so pip takes the CPU build, in this same command.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[all]"
	touch $(STAMP)

up: install
	$(BIN)/cairn up

down: install
	$(BIN)/cairn down

status: install
	$(BIN)/cairn status

test: install
	$(BIN)/python -m pytest

test-unit: install
	$(BIN)/python -m pytest -m unit

compose-config:
	docker-compose -f docker-compose.yml config --quiet

clean:
	rm -rf $(VENV) .pytest_cache
