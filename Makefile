# The two commands of the README, and their parts. Every target sets up
# what is missing first (deploy/setup.sh is idempotent and fast when done).
VENV ?= $(CURDIR)/.venv
BUILD ?= $(CURDIR)/build
PY := $(VENV)/bin/python
export KILN_VENV := $(VENV)
export KILN_BUILD_DIR := $(BUILD)

.PHONY: setup demo test test-cc test-py bench clean

setup:
	@bash deploy/setup.sh

demo: setup
	@$(PY) -m kiln.demo

test: setup
	@$(MAKE) --no-print-directory test-cc test-py

test-cc:
	@cd $(BUILD) && ctest --output-on-failure -j2 --timeout 300 --progress

test-py:
	@$(PY) -m pytest tests/python -q

bench: setup
	@$(PY) bench/models/compare.py

clean:
	rm -rf $(BUILD)
