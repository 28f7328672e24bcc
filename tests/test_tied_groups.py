"""verl_ext/patches/tied_groups.py: a GRPO group whose rewards are all equal gets advantage exactly 0 through verl
0.9.1's own advantage path; every other row keeps verl's numbers bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from verl_ext.patches import tied_groups

REPO = Path(__file__).resolve().parents[1]
# an engine reward as the reward pays it (0.1 + 0.9 x value): float32 does not average eight of it exactly
TIED = 0.1 + 0.9 * 0.8374


def batch(groups: list[list[float]], length: int = 3) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Token-level rewards (the score on each response's last token), response mask and uid index for ``groups``."""
    scores = [s for group in groups for s in group]
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    index = np.array([f"uid-{g}" for g, group in enumerate(groups) for _ in group], dtype=object)
    return rewards, torch.ones(len(scores), length), index


@pytest.fixture
def core_algos(monkeypatch):
    """verl's core_algos with the patch applied for this test only (the originals are restored afterwards)."""
    from verl.trainer.ppo import core_algos as module

    for name, key in tied_groups.ESTIMATORS:
        monkeypatch.setattr(module, name, getattr(module, name))
        monkeypatch.setitem(module.ADV_ESTIMATOR_REGISTRY, key, module.ADV_ESTIMATOR_REGISTRY[key])
    originals = {name: getattr(module, name) for name, _ in tied_groups.ESTIMATORS}
    tied_groups._patch_core_algos(module)
    return module, originals


def test_verl_gives_a_tied_group_rounding_noise_and_the_patch_gives_it_zero(core_algos):
    module, originals = core_algos
    rewards, mask, index = batch([[TIED] * 8, [0.1, 0.55, 1.0, 0.55, 0.1, 1.0, 0.3, 0.3], [0.7]])
    verl_adv, _ = originals["compute_grpo_outcome_advantage"](rewards, mask, index)
    assert verl_adv[:8].abs().max() > 0.01  # the defect: eight equal rewards, nonzero advantages
    ours, returns = module.compute_grpo_outcome_advantage(rewards, mask, index)
    assert torch.count_nonzero(ours[:8]) == 0 and returns is ours
    assert torch.equal(ours[8:16], verl_adv[8:16])  # a group with signal: verl's numbers, bit for bit
    assert torch.equal(ours[16], verl_adv[16])  # a group of one keeps verl's rule (mean 0, std 1)
    dr_grpo, _ = module.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert torch.count_nonzero(dr_grpo[:8]) == 0


def test_the_vectorized_estimator_and_the_registry_entries_are_patched_too(core_algos):
    module, originals = core_algos
    rewards, mask, index = batch([[TIED] * 4, [0.2, 0.9, 0.2, 0.9]])
    for name, key in tied_groups.ESTIMATORS:
        assert module.get_adv_estimator_fn(key) is getattr(module, name) is not originals[name]
        ours, _ = getattr(module, name)(rewards, mask, index)
        verl, _ = originals[name](rewards, mask, index)
        assert torch.count_nonzero(ours[:4]) == 0 and torch.equal(ours[4:], verl[4:])
    tied_groups._patch_core_algos(module)  # idempotent: no wrapper around the wrapper
    assert module.compute_grpo_outcome_advantage.__wrapped__ is originals["compute_grpo_outcome_advantage"]


def test_verls_trainer_path_gets_zero_for_tied_groups(core_algos):
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, index = batch([[TIED] * 8, [0.1, 1.0] * 4])
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": index})
    out = compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO, num_repeat=8)
    assert torch.count_nonzero(out.batch["advantages"][:8]) == 0
    assert out.batch["advantages"][8:, -1].tolist() == pytest.approx([-0.935, 0.935] * 4, abs=1e-3)


def test_tied_rows_counts_groups_of_two_or_more_with_equal_sums():
    scores = torch.tensor([0.5, 0.5, 0.5, 0.2, 0.3, 0.9, 0.4, 0.4])
    index = np.array(["a", "a", "a", "b", "b", "c", "d", "d"], dtype=object)
    assert tied_groups.tied_rows(scores, index).tolist() == [True, True, True, False, False, False, True, True]
    assert tied_groups.tied_rows(torch.tensor([]), np.array([], dtype=object)).tolist() == []


@pytest.mark.slow
def test_verl_applies_it_when_the_variable_names_it_and_not_otherwise():
    script = textwrap.dedent("""
        import json
        import verl
        from verl.trainer.ppo import core_algos
        print(json.dumps({name: hasattr(getattr(core_algos, name), "__wrapped__")
                          for name in ("compute_grpo_outcome_advantage", "compute_grpo_vectorized_outcome_advantage")}))
    """)
    for modules, expected in (("verl_ext.patches.tied_groups", True), ("", False)):
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                               env={**os.environ, "VERL_USE_EXTERNAL_MODULES": modules})
        assert child.returncode == 0, child.stderr[-3000:]
        assert set(json.loads(child.stdout.strip().splitlines()[-1]).values()) == {expected}
