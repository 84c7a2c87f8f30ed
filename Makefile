# The two commands of the README: `make up` runs Cairn, `make test` passes the tests.
# Both create the virtual environment first when it is missing.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install up down status test test-unit bench compose-config clean

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

# Two workers, each taking whole test files so a module's running system is started once. A worker that
# crashes (tests/hang_backstop.py ends one stuck past its timeout) ends the run rather than being replaced:
# pytest-xdist's file scheduling then runs the crashed test again and can wait for good.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 0 --durations 10

test-unit: install
	$(BIN)/python -m pytest -m unit

# Speed figures, each a ratio against a baseline measured in the same run (not part of `make test`).
# The first run builds a ~20k-chunk SciFact index under CAIRN_DATA_DIR/bench (long: every chunk is
# encoded once); later runs reuse it. BENCH_ARGS passes options, e.g. BENCH_ARGS="--repeats 5".
bench: install
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Cairn's processes under moderate, bounded load for 10 minutes: no errors, resident memory of each service
# grows < 10 % after a 2-minute warm-up, outboxes drain, analytics counts each request once (exit 1 on a miss).
# SOAK_ARGS passes options, e.g. SOAK_ARGS="--minutes 3 --warmup-minutes 1".
.PHONY: soak
soak: install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

# Checks docker-compose.yml as the compose client parses it; the service token it demands at run time is
# given a stand-in here when the environment has none.
compose-config:
	CAIRN_SERVICE_TOKEN="$${CAIRN_SERVICE_TOKEN:-compose-config-check}" docker-compose -f docker-compose.yml config --quiet

clean:
	rm -rf $(VENV) .pytest_cache

# docs/events.md is generated from the event models in shared/events.py; a unit test checks it is current.
.PHONY: docs-events
docs-events: install
	$(BIN)/python -m shared.event_docs > docs/events.md
