"""The special-token fix for tokenizers converted from GGUF metadata, and the check of the saved folder.

transformers' GGUF loader takes the tokenizer's eos and pad from the GGUF metadata. SmolLM2's says eos is
`<|im_start|>` (id 1) and has no pad, so a trainer that pads with eos pads with `<|im_start|>`, and generation
never stops at the end of a ChatML turn (`<|im_end|>`). The fix sets the source's bos/eos/pad on the tokenizer,
the model config and the generation config, after checking that each token is in the vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import PretrainedError
from .sources import SpecialTokens

ROLES = ("bos", "eos", "pad")


def token_ids(tokenizer: Any, tokens: SpecialTokens) -> dict[str, int]:
    """{role: id} of the source's special tokens; a token missing from the vocabulary is an error naming it."""
    vocab = tokenizer.get_vocab()
    ids: dict[str, int] = {}
    for role in ROLES:
        token = getattr(tokens, role)
        if token not in vocab:
            raise PretrainedError(f"{role} token {token!r} is not in the tokenizer's vocabulary ({len(vocab)} tokens)")
        ids[role] = int(vocab[token])
    if ids["eos"] == ids["pad"]:
        raise PretrainedError(f"eos {tokens.eos!r} and pad {tokens.pad!r} have the same id {ids['eos']}")
    return ids


def fix_special_tokens(tokenizer: Any, model: Any, tokens: SpecialTokens, model_max_length: int) -> dict[str, int]:
    """Set bos/eos/pad (and the tokenizer's length limit and decoding clean-up) on tokenizer, config and generation
    config; returns {role: id}."""
    ids = token_ids(tokenizer, tokens)
    tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = tokens.bos, tokens.eos, tokens.pad
    tokenizer.model_max_length = model_max_length
    # the GGUF loader sets WordPiece-style clean-up, which transformers ignores (with a warning) for BPE decoding
    tokenizer.clean_up_tokenization_spaces = False
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id, config.pad_token_id = ids["bos"], ids["eos"], ids["pad"]
    return ids


def check_folder(folder: Path, tokens: SpecialTokens, ids: dict[str, int]) -> None:
    """Reload the saved tokenizer and read config.json / generation_config.json: every special token and id must
    agree, and the chat template must have survived. Raises naming the file, key and value."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    for role in ROLES:
        token, token_id = getattr(tokenizer, f"{role}_token"), getattr(tokenizer, f"{role}_token_id")
        if token != getattr(tokens, role) or token_id != ids[role]:
            raise PretrainedError(f"{folder}/tokenizer_config.json: {role} is {token!r} (id {token_id}), "
                                  f"expected {getattr(tokens, role)!r} (id {ids[role]})")
    if not getattr(tokenizer, "chat_template", None):
        raise PretrainedError(f"{folder}: the saved tokenizer lost its chat template")
    for name in ("config.json", "generation_config.json"):
        data: dict[str, Any] = json.loads((folder / name).read_text(encoding="utf-8"))
        for role in ROLES:
            if data.get(f"{role}_token_id") != ids[role]:
                raise PretrainedError(f"{folder}/{name}: {role}_token_id is {data.get(f'{role}_token_id')!r}, "
                                      f"expected {ids[role]} ({getattr(tokens, role)!r})")
