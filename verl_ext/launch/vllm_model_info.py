"""Fill vLLM's model-info cache for the run's model while verl starts (``ROLLOUT_MODEL_INFO=warm``).

Before vLLM's server builds its engine, vLLM asks its model registry what the checkpoint's architecture supports
(vllm 0.24 ``vllm/model_executor/models/registry.py``, ``_LazyRegisteredModel.inspect_model_cls``). Unless
``$VLLM_CACHE_ROOT/modelinfos`` (default ``~/.cache/vllm``) holds the answer for that model file's hash, vLLM starts a
fresh interpreter that imports torch and vLLM to find out, and waits for it: 19.7 s of a machine's first run on a
lent H100, between the server's "Enabling cumem allocator" and "Resolved architecture" lines, and 0 s in every
later run (docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q). The driver (``verl_ext.launch.ppo_main --vllm-model-info warm``) starts this module in
a background process as the run is launched, about a minute before vLLM's server asks; vLLM's own registry code
checks the cache, inspects and writes the answer atomically. A server that asks first inspects for itself, as it
would without this, so the warm-up can only save time. Another node's first run still inspects on that node.

    python -m verl_ext.launch.vllm_model_info MODEL_PATH     # a local checkpoint or a Hugging Face id in the cache
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

MARK = "[verl-ext] vLLM model info"
MODEL_PATH_KEY = "actor_rollout_ref.model.path"
ROLLOUT_NAME_KEY = "actor_rollout_ref.rollout.name"


def config_file(model_path: str) -> Path | None:
    """The checkpoint's ``config.json``: in a local folder, or in the Hugging Face cache for a hub id (no download)."""
    local = Path(os.path.expanduser(model_path)) / "config.json"
    if local.is_file():
        return local
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(model_path, "config.json")
    except ValueError:  # huggingface_hub's HFValidationError: a missing local path is no repo id either
        return None
    return Path(cached) if isinstance(cached, str) else None


def architectures(model_path: str) -> list[str]:
    """The architectures the checkpoint's config names (empty if it has no readable config)."""
    path = config_file(model_path)
    if path is None:
        return []
    try:
        names = json.loads(path.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [name for name in names if isinstance(name, str)]


def warm(model_path: str) -> list[str]:
    """Have vLLM's registry inspect each architecture of ``model_path`` (from its cache, or inspected and cached);
    one line of outcome per architecture."""
    names = architectures(model_path)
    if not names:
        return [f"{model_path}: no config.json with architectures; nothing to warm"]
    from vllm.model_executor.models import registry

    inspect = getattr(registry.ModelRegistry, "_try_inspect_model_cls", None)
    if inspect is None:
        return ["vLLM's ModelRegistry has no _try_inspect_model_cls (not vLLM 0.24?); nothing warmed"]
    outcomes = []
    for name in names:
        started = time.perf_counter()
        found = inspect(name)
        took = time.perf_counter() - started
        outcomes.append(f"{name}: cached ({took:.1f} s)" if found is not None
                        else f"{name}: not a vLLM architecture, or its inspection failed (vLLM's log says which)")
    return outcomes


def override_value(overrides: Sequence[str], key: str) -> str | None:
    """The value the last ``key=value`` override (``+``/``++`` prefixes too) gives, or None."""
    value = None
    for item in overrides:
        name, sep, given = item.partition("=")
        if sep and name.lstrip("+") == key:
            value = given.strip("'\"")
    return value


def start_in_background(overrides: Sequence[str]) -> subprocess.Popen | None:
    """Start ``warm`` for the run's model in a process of its own when the rollout is vLLM; never waited for."""
    model_path = override_value(overrides, MODEL_PATH_KEY)
    if not model_path or override_value(overrides, ROLLOUT_NAME_KEY) not in (None, "vllm"):
        return None
    return subprocess.Popen([sys.executable, "-m", __name__, model_path], stdin=subprocess.DEVNULL,
                            start_new_session=True)  # not in the terminal's process group: Ctrl-C stops verl only


def stop(process: subprocess.Popen | None) -> None:
    """End a warm-up that ``start_in_background`` started, with the inspection process vLLM may have started."""
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)  # its own process group (start_new_session)
        except ProcessLookupError:
            pass
        process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m verl_ext.launch.vllm_model_info MODEL_PATH", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        outcomes = warm(args[0])
    except Exception as err:  # a warm-up must never stop the run: vLLM's server inspects for itself
        outcomes = [f"not warmed: {type(err).__name__}: {err}"]
    print(f"{MARK}: {'; '.join(outcomes)}; {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
