# The two commands of the README, and their parts. Every target sets up
# what is missing first (deploy/setup.sh is idempotent and fast when done).
VENV ?= $(CURDIR)/.venv
BUILD ?= $(CURDIR)/build
PY := $(VENV)/bin/python
export KILN_VENV := $(VENV)
export KILN_BUILD_DIR := $(BUILD)

.PHONY: setup demo test test-cc test-py test-hostile bench bench-suites bench-opinfo clean

setup:
	@bash deploy/setup.sh

demo: setup
	@$(PY) -m kiln.demo

test: setup
	@$(MAKE) --no-print-directory test-cc test-py test-hostile

test-cc:
	@cd $(BUILD) && ctest --output-on-failure -j2 --timeout 300 --progress

test-py:
	@$(PY) -m pytest tests/python -q

# Clients that lie, race and shrink their memory (tests/hostile/conftest.py).
test-hostile:
	@$(PY) -m pytest tests/hostile -q

# Whole-model benchmark (bench/models/run.py): every model at batch 1 and 8
# under eager, Inductor, OpenVINO, ONNX Runtime and Kiln; about an hour on
# 2 cores. `make bench BENCH_ARGS=--quick` takes a few minutes; see
# `run.py --help` for the rest. It writes bench/RESULTS.md (host, CPU flags,
# FMA peak, commit, command, tables) and bench/RESULTS.svg, the published
# results, besides the run's own directory under bench/results/. The
# benchmark's packages are installed into the venv once (the stamp is
# redone when the requirement files change).
BENCH_ARGS ?=
BENCH_STAMP := $(VENV)/.kiln-bench-requirements

$(BENCH_STAMP): deploy/requirements-bench.txt deploy/requirements.txt
	@$(PY) -m pip install -q -r deploy/requirements-bench.txt -c deploy/requirements.txt
	@touch $@

bench: setup $(BENCH_STAMP)
	@KILN_BENCH_MAKE_COMMAND="make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
	  $(PY) bench/models/run.py --results-file bench/RESULTS.md $(BENCH_ARGS)

# PyTorch's CPU benchmark suites (bench/suites/): every model of its TIMM
# and Hugging Face lists, built with random weights, through the same
# harness and backends as `make bench`. Writes bench/suites/RESULTS-timm-<isa>.md
# and RESULTS-huggingface-<isa>.md, one pair per kind of host (avx2, avx512).
# SUITE_ARGS go to run.py of both, e.g.
# SUITE_ARGS='--batch 1 --backends eager,kiln' for a coverage run.
SUITE_ARGS ?=

# Op breadth against PyTorch's OpInfo database (bench/opinfo/run.py): every
# fp32 sample of every op through Kiln, compared with eager; writes
# bench/opinfo/RESULTS.md and refreshes tests/python/opinfo_in_daemon.txt
# (the ops the CI test holds to running wholly in the daemon). One process
# per core, each with its own kilnd.
bench-opinfo: setup
	@$(PY) bench/opinfo/run.py --jobs $(shell nproc) --in-daemon-list tests/python/opinfo_in_daemon.txt

bench-suites: setup $(BENCH_STAMP)
	@for suite in timm huggingface; do \
	  KILN_BENCH_MAKE_COMMAND="make bench-suites$(if $(SUITE_ARGS), SUITE_ARGS='$(SUITE_ARGS)')" \
	    $(PY) bench/models/run.py --suite $$suite \
	      --results-file 'bench/suites/RESULTS-$$suite-{isa}.md' $(SUITE_ARGS) || exit 1; \
	done

clean:
	rm -rf $(BUILD)
