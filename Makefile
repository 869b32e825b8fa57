# The README's two commands, `make demo` and `make test`, do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Every process of a run needs these (see src/platform/lmplatform/runtime.py for why).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_AUTH_MODE := disabled
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONUNBUFFERED := 1

.PHONY: install demo test test-cluster test-results test-fast lint bench docs clean

install: $(STAMP)

# torch is installed first and alone so that no other package's looser torch
# requirement pulls the multi-GB CUDA build on a CPU machine.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,bench,openvino]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lmp demo $(if $(DATA),--data $(DATA),)

# The multi-node tests (a three-node cluster on this machine, nodes killed and restored) are a heavy run of their
# own, like the benches: `make test-cluster`.
# Two pytest processes (pytest-xdist), each taking whole test files: one process keeps about 1.5 of 2 cores busy, as
# Ray tests wait on process start-up and polls; two keep both busy. Each process that runs a Ray test starts its own
# session Ray (tests/conftest.py), and a file's module fixtures are made once. Files go out in collection order,
# which tests/conftest.py makes heaviest first (xdist's own order, most tests first, left a long file for last).
PYTEST_LANES := -n 2 --dist loadfile --no-loadscope-reorder
# The package's bytecode, written once: every Ray worker of the suite imports the package, and where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) each compiles it again (about 0.4 s a process).
COMPILE := $(BIN)/python -m compileall -q src/platform/lmplatform

test: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_LANES) --durations=25 -m "not cluster"

test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 -m cluster tests/cluster

lint: $(STAMP)
	$(BIN)/ruff check src tests bench ray_jobs

# The suite as `make test` runs it, its counts and seconds saved for docs/benchmarks.md (time it on an idle machine).
test-results: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_LANES) --durations=25 -m "not cluster" -p tests.suite_results --suite-results bench/results/test_suite.json

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_LANES) -m "not ray"

bench: $(STAMP)
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/encode_throughput.py
	$(BIN)/python bench/openvino_streams.py
	$(BIN)/python bench/index_search.py
	$(BIN)/python bench/quality.py
	$(BIN)/python bench/tune_overhead.py
	$(BIN)/python bench/cluster_throughput.py
	$(BIN)/python bench/serve_load.py
	$(BIN)/python bench/serve_reports.py
	$(BIN)/python bench/serve_scale.py
	$(BIN)/python bench/bm25_scale.py
	$(BIN)/python bench/store_scale.py
	$(BIN)/python bench/trouble_reports.py
	$(BIN)/python bench/openoffice_retrieval.py
	$(BIN)/python bench/tracker_online.py
	$(BIN)/python bench/tracker_fusion_fit.py
	$(BIN)/python bench/tracker_exports.py

docs: $(STAMP)
	$(BIN)/python -m lmplatform.objectives.config_reference > docs/config-reference.md

clean:
	rm -rf runs outputs mlruns .pytest_cache
