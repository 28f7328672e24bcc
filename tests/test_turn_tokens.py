"""The game token stream's turn boundary read from the chat template (verl_ext/games/turn_tokens.py), for
template shapes beyond ChatML: a boundary with nothing after the end token (Llama 3), a next message that
opens with the model's stop token (GLM), and a template that rewrites earlier turns (verl's builder is kept)."""

from __future__ import annotations

import logging

import pytest
from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder

from verl_ext.games.turn_tokens import (TemplateProbeError, TurnBoundary, probe_turn_boundary,
                                        reproduces_template, template_builder)

LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
GLM = ("[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
# drops the content of assistant turns more than one message before the end (as templates that strip old reasoning do)
REWRITING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and "
             "loop.index0 < messages|length - 2 %}(earlier reply){% else %}{{ m['content'] }}{% endif %}"
             "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHATML_WITHOUT_CONSECUTIVE_USERS = (
    "{% for m in messages %}{% if loop.index0 > 0 and m['role'] == messages[loop.index0 - 1]['role'] %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _tokenizer(tokenizer_dir, template: str, specials: tuple[str, ...] = (), eos: str | None = None):
    """A fresh tokenizer object (the builder cache is per object) with ``template`` and extra special tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if specials:
        tokenizer.add_special_tokens({"additional_special_tokens": list(specials)})
    if eos:
        tokenizer.eos_token = eos
    tokenizer.chat_template = template
    return tokenizer


def _ids(tokenizer, *tokens: str) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def test_chatml_inserts_the_newline_after_the_end_token(tokenizer_dir):
    tokenizer = _tokenizer(tokenizer_dir, "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                                          "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                                          "<|im_start|>assistant\n{% endif %}")
    builder = template_builder(tokenizer)
    newline = tuple(tokenizer.encode("\n", add_special_tokens=False))
    assert builder is not None and builder.boundary == TurnBoundary(_ids(tokenizer, "<|im_end|>")[0], newline)
    assert template_builder(tokenizer) is builder  # built once per tokenizer


def test_llama3_closes_a_turn_with_its_end_token_only(tokenizer_dir):
    tokenizer = _tokenizer(tokenizer_dir, LLAMA3, ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
                           eos="<|eot_id|>")
    builder = template_builder(tokenizer)
    assert builder is not None and builder.boundary == TurnBoundary(_ids(tokenizer, "<|eot_id|>")[0])
    assert reproduces_template(builder, builder.boundary.end)


def test_glm_drops_the_stop_token_that_opens_the_next_message(tokenizer_dir):
    tokenizer = _tokenizer(tokenizer_dir, GLM, ("[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|system|>"),
                           eos="<|user|>")
    builder = template_builder(tokenizer)
    user = _ids(tokenizer, "<|user|>")[0]
    assert builder is not None and builder.boundary == TurnBoundary(user, end_opens_next=True)
    merged = builder.merge_context_tokens([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                                          [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                           {"role": "user", "content": "c"}], [7, 8, user])
    assert merged.removed_prefix_token_count == 1 and merged.token_ids[:3] == [7, 8, user]
    assert merged.token_ids.count(user) == 1


def test_a_template_that_rewrites_earlier_turns_keeps_verls_builder(tokenizer_dir, caplog):
    tokenizer = _tokenizer(tokenizer_dir, REWRITING)
    with caplog.at_level(logging.WARNING, logger="verl_ext.games.turn_tokens"):
        assert template_builder(tokenizer) is None
    assert "renders earlier turns differently" in caplog.text


def test_a_template_that_cannot_render_the_probe_is_reported(tokenizer_dir, caplog):
    tokenizer = _tokenizer(tokenizer_dir, CHATML_WITHOUT_CONSECUTIVE_USERS)
    with pytest.raises(TemplateProbeError, match="cannot render the probe conversation.*roles must alternate"):
        probe_turn_boundary(ContinuousTokenBuilder(tokenizer))
    with caplog.at_level(logging.WARNING, logger="verl_ext.games.turn_tokens"):
        assert template_builder(tokenizer) is None
    assert "keeping verl's model-type Continuous Token builder" in caplog.text
