# Two commands on a fresh CPU machine: `make setup` then `make test`.
PYTHON ?= python3
VENV ?= .venv
# CPU dev machines use the local CPU build; GPU nodes install the `vllm` extra instead (see README).
TORCH_SPEC ?= torch==2.13.0
PIP = $(VENV)/bin/python -m pip --disable-pip-version-check -q

.PHONY: setup test demo
setup:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e ".[dev]"

test:
	$(VENV)/bin/python -m pytest -n 2 tests

demo:
	$(VENV)/bin/verl-ext demo
