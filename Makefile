# Two commands: `make demo` (set up, then run the main job) and `make test`
# (set up, then run the whole test suite). Both create .venv when missing and
# install the package under constraints.txt, so a fresh machine with only
# python3 gets a known-good set of versions.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PYTEST_ARGS ?=

.PHONY: demo test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One stamp per set of extras: re-install when setup.py or the pins change.
$(VENV)/.installed-%: setup.py constraints.txt | $(BIN)/python
	$(PIP) install --disable-pip-version-check -q -c constraints.txt -e ".[$*]"
	touch $@

venv: $(VENV)/.installed-dev

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(VENV)/.installed-onnx,plot
	$(BIN)/python examples/demo.py --out demo_output

clean:
	rm -rf $(VENV) demo_output .pytest_cache
