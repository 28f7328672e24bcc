"""``DynamicEnvDataset``: verl RL dataset whose rows are built on access from the env adapters.

Use with ``data.custom_cls.path=pkg://verl_ext.dataset data.custom_cls.name=DynamicEnvDataset
data.train_files=env://train data.val_files=env://val`` plus ``+data.env.*`` settings (see mixture.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from .mixture import EnvMixture, parse_split, subsample

logger = logging.getLogger(__name__)
# Prompts of the first tasks of every case are tokenised at start-up; over this share of
# data.max_prompt_length we warn, over the limit we refuse to start.
_PROMPT_WARN_SHARE = 0.9
_PROMPT_CHECK_TASKS = 2


class DynamicEnvDataset(Dataset):
    """Lazy, deterministic env tasks in verl's RL item format (text-only models)."""

    def __init__(self, data_files: Any, tokenizer: Any, config: Any, processor: Any = None,
                 max_samples: int = -1) -> None:
        self.split = parse_split(data_files)
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config
        self.mixture = EnvMixture(_get(config, "env"))
        seed = _get(config, "seed") or 0
        self.refs = subsample(self.mixture.plan(self.split), max_samples, int(seed))
        if not self.refs:
            raise ValueError(f"DynamicEnvDataset: split {self.split!r} has no rows")
        max_prompt_length = _get(config, "max_prompt_length")
        if tokenizer is not None and max_prompt_length:
            self._check_prompt_lengths(int(max_prompt_length))

    def _check_prompt_lengths(self, limit: int) -> None:
        checked: dict[tuple[str, str], int] = {}
        for ref in self.refs:
            key = (ref.env, ref.case)
            if checked.get(key, 0) >= _PROMPT_CHECK_TASKS:
                continue
            checked[key] = checked.get(key, 0) + 1
            messages = list(self.mixture.build(ref).messages)
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            n = len(ids)
            if n > limit:
                raise ValueError(f"data.max_prompt_length={limit} is too small: task {ref.index} of "
                                 f"{ref.env}/{ref.case} has a {n}-token prompt; raise it or drop the case")
            if n > _PROMPT_WARN_SHARE * limit:
                logger.warning("%s/%s: prompt of %d tokens is close to data.max_prompt_length=%d",
                               ref.env, ref.case, n, limit)

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, item: int) -> dict[str, Any]:
        started = time.perf_counter()
        row = self.mixture.row(self.refs[item], self.split, item)
        row["raw_prompt"] = row.pop("prompt")
        row["index"] = item
        row["tools_kwargs"] = {}
        row["interaction_kwargs"] = {}
        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        # Travels with the sample to compute_score, which reports it, so runs can show our share of step time.
        row["extra_info"]["dataset_ms"] = (time.perf_counter() - started) * 1000.0
        return row


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    if hasattr(config, "get"):
        return config.get(key)
    return getattr(config, key, None)
