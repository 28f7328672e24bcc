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
# uv installs what pip would (the same versions here; 2026-11-27: 4 min -> 1.5 min with a cold cache, bytecode
# written). uv reads no pip configuration, so pip's find-links (a machine's local wheels, e.g. a CPU build of
# torch) are passed on.
UV_SPEC ?= uv==0.13.9
UV = $(VENV)/bin/python -m uv pip install -q --python $(VENV)/bin/python --compile-bytecode
FIND_LINKS := $(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_LINKS = $(foreach link,$(FIND_LINKS),--find-links $(link))

.PHONY: setup test demo
setup:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip --disable-pip-version-check -q install "$(UV_SPEC)"
	$(UV) $(UV_LINKS) "$(TORCH_SPEC)"
	$(UV) $(UV_LINKS) "$(TORCH_SPEC)" -e ".[dev]"
	$(UV) --no-deps --target $(VENV)/trl-site "$(TRL_SPEC)"

test:
	$(VENV)/bin/python -m pytest -n 2 tests

demo:
	$(VENV)/bin/verl-ext demo
