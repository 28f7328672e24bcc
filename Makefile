# Two commands on a fresh CPU machine: `make setup` then `make test`.
PYTHON ?= python3
VENV ?= .venv
# CPU dev machines use the local CPU build; GPU nodes install the `vllm` extra instead (see README).
TORCH_SPEC ?= torch==2.13.0
# TRL, the peer of the speed benchmark (bench/speed/trl_grpo.py), in a folder of its own as on the GPU machines
# (TRL_PYTHONPATH): installed beside verl, trl 1.16 breaks verl 0.9.1's model patching (verl imports trl's
# value-head model whenever trl is importable, models/transformers/monkey_patch.py:352-356, and trl 1.16 has no
# such model any more). Its dependencies are verl's.
TRL_SPEC ?= trl==1.16.0
PIP = $(VENV)/bin/python -m pip --disable-pip-version-check -q

.PHONY: setup test demo
setup:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -e ".[dev]"
	$(PIP) install --no-deps --upgrade --target $(VENV)/trl-site "$(TRL_SPEC)"

test:
	$(VENV)/bin/python -m pytest -n 2 tests

demo:
	$(VENV)/bin/verl-ext demo
