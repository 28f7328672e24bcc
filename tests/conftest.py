"""Shared fixtures: a tokenizer trained in-process (no hub downloads) and env settings used across tests."""

from __future__ import annotations

from pathlib import Path

import pytest

QWEN_STYLE_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(out_dir: Path, texts: list[str]) -> Path:
    """Train a small byte-level BPE with Qwen-style special tokens and chat template; save it HF-style."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = QWEN_STYLE_TEMPLATE
    fast.save_pretrained(out_dir)
    return out_dir


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
