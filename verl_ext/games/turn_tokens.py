"""A Continuous Token builder chosen from the chat template, not from the model type.

verl 0.9.1 picks its Continuous Token builder by the exact ``model_type`` of the model's config
(``verl/utils/tokenizer/continuous_token_wiring.py``) and falls back to a generic builder that concatenates
the model's reply and the next message's rendering. A ChatML template renders ``<|im_end|>\\n`` after every
turn while the model stops at ``<|im_end|>``: only the Qwen builder inserts the ``\\n``, so a Llama-type model
with a ChatML template (SmolLM2) trained on turn boundaries it never saw in SFT rows or at inference.

Here the boundary comes from the template itself. A probe conversation (user, assistant, user) is rendered
with the tokenizer: what the template puts after the assistant's content and before the next message's own
rendering (the delta the Continuous Token helpers append) is the turn's closing. Its first token is the
end-of-turn token the model stops at; the rest (ChatML: ``\\n``) is inserted as an environment token (mask 0)
before the next message. A template whose closing is empty and whose next message opens with the model's
stop token (GLM's ``<|user|>``) gets that token dropped from the reply's end instead, as verl's GLM builder
does. The builder is then checked on a three-turn probe against ``apply_chat_template``; a template whose
rendering cannot be reproduced turn by turn (it rewrites earlier turns) keeps verl's builder, with a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult

logger = logging.getLogger(__name__)
_USER = "verl-ext probe: your move."
_REPLY = "verl-ext-probe-reply"
# (tokenizer id, template, template kwargs) -> (that tokenizer, its builder): the tokenizer is kept so an id is
# never reused by another one while its entry lives.
_BUILDERS: dict[tuple[int, str, str], tuple[Any, TemplateContinuousTokenBuilder | None]] = {}


class TemplateProbeError(ValueError):
    """The chat template's turn boundary could not be read from a probe conversation."""


@dataclass(frozen=True)
class TurnBoundary:
    """How the template closes an assistant turn: ``end`` (the token the model stops at), then ``after_end``
    (tokens the template adds before the next message; ChatML ``\\n``). ``end_opens_next``: nothing closes the
    turn and the next message starts with ``end`` (the stop token is dropped before it is rendered again)."""

    end: int
    after_end: tuple[int, ...] = ()
    end_opens_next: bool = False


def _probe(user: str = _USER, reply: str = _REPLY) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(the conversation up to the assistant's reply, the same plus the next user message)."""
    conversation = [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    return conversation, conversation + [{"role": "user", "content": user + " (next)"}]


def probe_turn_boundary(builder: ContinuousTokenBuilder) -> TurnBoundary:
    """The turn boundary of ``builder``'s tokenizer and chat template (``TemplateProbeError`` if unreadable)."""
    tokenizer = builder.tokenizer
    conversation, extended = _probe()
    try:
        prompt = builder.build_initial_tokens(conversation[:1])
        full = builder._render_tokens(extended, add_generation_prompt=True)
        delta = builder.tokenize_context_incremental_messages(conversation, extended)
    except Exception as err:  # noqa: BLE001 - any template error means: no probe
        raise TemplateProbeError(f"the chat template cannot render the probe conversation: {err!r}") from err
    reply = [int(t) for t in tokenizer.encode(_REPLY, add_special_tokens=False)]
    if full[: len(prompt)] != prompt or not delta or full[len(full) - len(delta):] != delta:
        raise TemplateProbeError("the chat template's rendering of a conversation does not start with its first "
                                 "prompt or end with the next message's own rendering")
    between = full[len(prompt): len(full) - len(delta)]
    if between[: len(reply)] != reply:
        raise TemplateProbeError(f"the chat template changes the reply's tokens ({between!r} vs {reply!r})")
    closing = between[len(reply):]
    if closing:
        return TurnBoundary(int(closing[0]), tuple(int(t) for t in closing[1:]))
    stops = _stop_tokens(tokenizer)
    if int(delta[0]) in stops:
        return TurnBoundary(int(delta[0]), end_opens_next=True)
    raise TemplateProbeError(f"the chat template closes an assistant turn with nothing, and the next message "
                             f"does not open with a stop token ({delta[0]!r} not in {sorted(stops)!r})")


def _stop_tokens(tokenizer: Any) -> set[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = eos if isinstance(eos, list) else [eos]
    return {int(t) for t in ids if t is not None}


class TemplateContinuousTokenBuilder(ContinuousTokenBuilder):
    """verl's generic builder plus the template's own turn boundary at each reply -> next message junction."""

    def __init__(self, tokenizer: Any, boundary: TurnBoundary, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.boundary = boundary

    def _merge_context_token_ids(self, runtime_token_ids: list[int], appended_token_ids: list[int],
                                 **kwargs: Any) -> MergeResult:
        prefix, inserted, removed = list(runtime_token_ids), [], 0
        ends_turn = bool(prefix) and prefix[-1] == self.boundary.end
        if ends_turn and self.boundary.after_end:
            inserted = list(self.boundary.after_end)
        elif ends_turn and self.boundary.end_opens_next and appended_token_ids[:1] == [self.boundary.end]:
            prefix, removed = prefix[:-1], 1
        return MergeResult(token_ids=prefix + inserted + list(appended_token_ids),
                           appended_token_count=len(appended_token_ids), kind="context",
                           inserted_token_ids=inserted, removed_prefix_token_count=removed)


def reproduces_template(builder: ContinuousTokenBuilder, end: int) -> bool:
    """Whether ``builder`` rebuilds a three-turn probe game token for token as the chat template renders it
    (replies generated as their tokens plus ``end``, the way a model that stops writes them)."""
    tokenizer = builder.tokenizer
    messages = [{"role": "user", "content": f"{_USER} 1"}]
    ids = builder.build_initial_tokens(messages)
    for turn in (2, 3):
        reply = f"{_REPLY} {turn}"
        ids = ids + [int(t) for t in tokenizer.encode(reply, add_special_tokens=False)] + [end]
        previous = messages + [{"role": "assistant", "content": reply}]
        messages = previous + [{"role": "user", "content": f"{_USER} {turn}"}]
        ids = builder.merge_context_tokens(previous, messages, ids).token_ids
    return ids == builder._render_tokens(messages, add_generation_prompt=True)


def template_builder(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None
                     ) -> TemplateContinuousTokenBuilder | None:
    """The template-derived builder for ``tokenizer``, or None (with a warning) where the template's boundary
    cannot be read or the builder does not reproduce the template. Cached per tokenizer and template kwargs."""
    kwargs = dict(chat_template_kwargs or {})
    key = (id(tokenizer), str(getattr(tokenizer, "chat_template", None)), json.dumps(kwargs, sort_keys=True,
                                                                                  default=str))
    if key not in _BUILDERS:
        builder: TemplateContinuousTokenBuilder | None = None
        try:
            boundary = probe_turn_boundary(ContinuousTokenBuilder(tokenizer, chat_template_kwargs=kwargs))
            candidate = TemplateContinuousTokenBuilder(tokenizer, boundary, chat_template_kwargs=kwargs)
            if reproduces_template(candidate, boundary.end):
                builder = candidate
                logger.info("game token stream: turn boundary from the chat template: end %r, then %r%s",
                            tokenizer.convert_ids_to_tokens(boundary.end),
                            tokenizer.convert_ids_to_tokens(list(boundary.after_end)),
                            " (the next message opens with the end token)" if boundary.end_opens_next else "")
            else:
                logger.warning("the chat template renders earlier turns differently from how they were generated; "
                               "the game token stream keeps verl's model-type Continuous Token builder")
        except TemplateProbeError as err:
            logger.warning("game token stream: %s; keeping verl's model-type Continuous Token builder", err)
        _BUILDERS[key] = (tokenizer, builder)
    return _BUILDERS[key][1]
