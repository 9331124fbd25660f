# Set-up and the commands of the README. `make demo` runs the main job, `make test` the tests,
# `make check` the fast tier of them.
# Both create .venv on first use. Where pip can see a local CPU wheel of torch 2.13.0 (as on the
# project's CI machines), it is installed first so pip does not pull a multi-GB CUDA build; anywhere
# else pip picks the torch that suits the machine (nothing pins users to the CPU build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test check lint clean system-packages

$(BIN)/sweeps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	-$(BIN)/pip install --quiet --no-index --no-deps torch==2.13.0 2>/dev/null
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/sweeps

demo: $(BIN)/sweeps
	$(BIN)/sweeps demo

# System packages the tests use (headless Chromium for the report's browser test; slurm-wlm and
# munge for the Slurm engine's). Best effort:
# installed as root where apt-get is there and the package is missing; waits for another apt's lock
# instead of failing on it; without them those tests are skipped with the reason.
system-packages:
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get -o DPkg::Lock::Timeout=300 install -y -q chromium >/dev/null 2>&1 || \
		{ apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 && \
		  apt-get -o DPkg::Lock::Timeout=300 install -y -q chromium >/dev/null 2>&1; } || \
		echo "note: could not install chromium; the browser test will be skipped"; \
	fi
	@# Slurm and munge for the Slurm engine's tests (a one-node cluster the tests start).
	@if ! command -v slurmctld >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge >/dev/null 2>&1 || \
		{ apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 && \
		  apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge >/dev/null 2>&1; } || \
		echo "note: could not install slurm-wlm and munge; the Slurm tests will be skipped"; \
	fi

# `make test`: ruff, then the whole suite in parallel (pytest-xdist, one worker per core; a test
# module stays on one worker, so its module-scoped fixtures are built once), the 25 slowest
# tests, and how long it all took. `make check`: ruff and the fast tier (no study, server,
# browser or cluster, nothing marked slow; see tests/conftest.py), for the inner loop.
# WORKERS=N sets the number of pytest workers (default: one per core).
WORKERS ?= auto
PYTEST_PARALLEL = -n $(WORKERS) --dist loadfile

test: $(BIN)/sweeps system-packages
	@start=$$(date +%s); \
	$(BIN)/ruff check . && \
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=25; \
	rc=$$?; echo "make test: $$(( $$(date +%s) - start )) s (exit $$rc)"; exit $$rc

check: $(BIN)/sweeps
	@start=$$(date +%s); \
	$(BIN)/ruff check . && \
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow and not integration" \
		--durations=10; \
	rc=$$?; echo "make check: $$(( $$(date +%s) - start )) s (exit $$rc)"; exit $$rc

lint: $(BIN)/sweeps
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) demo-out .pytest_cache
