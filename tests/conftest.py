"""Shared fixtures: a tokenizer trained in-process (no hub downloads) and env settings used across tests."""

from __future__ import annotations

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


# A small but mixed configuration: two games (one with hidden information) and two puzzle families.
SMALL_ENV = {
    "openspiel": {"game_types": ["hex", "leduc_poker"], "num_tasks_per_case": 6},
    "logic": {"cases": ["mini_sudoku", "syllogism"], "num_tasks_per_case": 4},
    "val_tasks_per_case": 3,
}


@pytest.fixture(autouse=True)
def _stop_kills_only_test_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench scripts' `stop` ends Ray's and vLLM's processes host-wide (bench/lent_gpu_env.sh end_leftovers),
    which is right on a lent GPU machine; under the tests it matches only a marker no real process carries, and
    does not wait for the GPU."""
    monkeypatch.setenv("LEFTOVER_PATTERN", "verl-ext-tests-no-such-process")
    monkeypatch.setenv("STOP_GPU_WAIT", "0")  # a developer's GPU may be busy with their own work
    monkeypatch.setenv("SPEED_MONITOR", "0")  # no background sampler from a session run in a test


@pytest.fixture(autouse=True)
def _no_vllm_start_method_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM entry points called in-process (bench/vllm_offline.py, the eval backend) set VLLM_WORKER_MULTIPROC_METHOD
    in os.environ, and the train scripts read it (ROLLOUT_WORKER_START's default): every test starts without it
    and none leaves it for the next."""
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "recorded-for-undo")  # undo then removes whatever is set
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD")
