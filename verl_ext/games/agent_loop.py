"""verl agent loop that plays one full game per sample (rows with ``agent_name: verl_ext_game``).

Registered with verl through ``agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``).
The game itself is a ``Match`` (``match.py``), the same loop the eval arena drives; this module only turns it
into tokens:

- the trained policy's conversation is one token stream built with verl's Continuous Token helpers: its
  first prompt, then per turn its reply (``response_mask`` 1, with the rollout's log-probs) and the next
  user message (the position prompt or a correction; mask 0); the builder's turn boundary comes from the
  chat template (``turn_tokens.py``: e.g. the ``\\n`` ChatML puts after ``<|im_end|>``, whatever the model
  type), so the stream is the template's rendering of the conversation;
- a self-play opponent is the same policy through the same server in its own context; its tokens never
  enter the trained sample;
- budgets: ``game.max_tokens_per_turn`` per reply and verl's ``rollout.response_length`` for the whole game
  (replies plus environment messages). Each call passes ``max_tokens = min(max_tokens_per_turn, room left)``,
  so a reply that would run over either budget is cut there, not dropped: the chat template's end-of-turn
  token is appended as an environment token (mask 0; cut off again if the reply took the budget's last
  position) and the cut reply is judged like any other (a complete answer is played, an unfinished one is
  rejected: a retry or a forfeit). The game is stopped as truncated (``response_budget``) and scored with
  ``truncated_reward`` only when the next user message leaves no room to generate a token;
- the reward is not set here: the game record goes into the sample's extra fields and verl's reward loop
  hands it to ``verl_ext.reward.compute_score`` (one scoring path for game and single-move rows).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.utils.profiler import simple_timer

from ..envs.config import to_plain
from ..envs.system_prompt import system_prompt_of, with_system_prompt
from . import RECORD_FIELD
from .match import Match, Message
from .setup import GameSetup, game_setup
from .turn_tokens import template_builder

__all__ = ["GameAgentLoop", "GameSetup", "game_setup", "turn_end_id"]

logger = logging.getLogger(__name__)
_TURN_END_IDS: dict[int, int | None] = {}
_SENTINEL = "verl-ext-reply-sentinel"


def turn_end_id(tokenizer: Any) -> int | None:
    """The token the chat template puts right after an assistant message (``<|im_end|>`` for ChatML).

    Found by rendering a two-message chat; falls back to the tokenizer's EOS. Cached per tokenizer.
    """
    key = id(tokenizer)
    if key not in _TURN_END_IDS:
        token: int | None = tokenizer.eos_token_id
        try:
            text = tokenizer.apply_chat_template([{"role": "user", "content": "x"},
                                                  {"role": "assistant", "content": _SENTINEL}], tokenize=False)
            after = text[text.rindex(_SENTINEL) + len(_SENTINEL):]
            ids = tokenizer.encode(after, add_special_tokens=False)
            if ids:
                token = int(ids[0])
        except Exception:  # a template that cannot render this chat: keep EOS
            logger.warning("could not find the end-of-turn token from the chat template; using EOS", exc_info=True)
        _TURN_END_IDS[key] = token
    return _TURN_END_IDS[key]


@dataclass
class _Context:
    """One player's token stream: ``ids`` = prompt + everything after it; ``mask``/``logprobs`` cover the part
    after the first prompt."""

    request_id: str
    messages: list[Message] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None


class GameAgentLoop(AgentLoopBase):
    """Plays the row's game to the end; the trained policy's side of it is the sample."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.turn_end = turn_end_id(self.tokenizer)
        if not self.continuous_token_builder.supports_multimodal():  # the turn boundary from the chat template
            builder = template_builder(self.tokenizer, to_plain(self.apply_chat_template_kwargs) or {})
            if builder is not None:
                self.continuous_token_builder, self.turn_end = builder, builder.boundary.end

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        setup = game_setup(kwargs.get("extra_info"))
        match = setup.new_match()
        with_logprobs = bool(sampling_params.get("logprobs"))
        learner = _Context(uuid4().hex, logprobs=[] if with_logprobs else None)
        opponents: dict[int, _Context] = {}
        metrics: dict[str, Any] = {"generate_sequences": 0.0, "tool_calls": 0.0}
        extra: dict[str, Any] = {}
        priority = int(kwargs.get("priority", 0) or 0)
        while True:
            with simple_timer("tool_calls", metrics):  # chance and bot moves (OpenSpiel MCTS searches here)
                request = await self.loop.run_in_executor(None, match.next_request)
            if request is None:
                break
            if request.learner:
                context, budget = learner, self.response_length
            else:
                context = opponents.setdefault(request.player, _Context(uuid4().hex))
                budget = self.prompt_length + self.response_length
            messages = with_system_prompt(request.messages, system_prompt_of(setup.adapter))  # the rows' own
            if not await self._append_messages(context, messages, budget, request.learner):
                match.truncate("response_budget" if request.learner else "opponent_context")
                break
            reply = await self._generate(context, sampling_params, budget, setup.settings.max_tokens_per_turn,
                                         request.learner, metrics, extra, priority)
            if reply is None:
                match.truncate("response_budget" if request.learner else "opponent_context")
                break
            match.submit(reply)
        if not learner.ids:  # the game ended before the trained seat moved (e.g. a move cap)
            learner.ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
            learner.messages = list(kwargs["raw_prompt"])
        if not learner.mask:  # verl needs a non-empty response: close the turn with an environment token
            self._append_env_tokens(learner, [self.turn_end] if self.turn_end is not None else [])
        match.record.model_tokens = sum(learner.mask)
        return self._output(learner, match, metrics, extra)

    async def _append_messages(self, context: _Context, messages: tuple[Message, ...], budget: int,
                               learner: bool) -> bool:
        """Bring ``context`` up to ``messages`` (its first prompt, or the user messages since its last reply).

        False (nothing appended) when that would leave no room to generate within ``budget``: the response
        budget for the trained policy, prompt + response length for a self-play opponent.
        """
        if not context.ids:
            context.ids = await self.ct_build_initial_tokens(list(messages))
            context.messages = list(messages)
            return learner or len(context.ids) < budget
        if len(messages) == len(context.messages):
            return True
        merged, mask, logprobs = await self.ct_merge_context_msg(
            context.messages, list(messages), context.ids, context.mask, context.logprobs)
        used = len(mask) if learner else len(merged.token_ids)
        if used >= budget:
            return False
        context.ids, context.mask, context.messages = merged.token_ids, mask, list(messages)
        if logprobs is not None:
            context.logprobs = logprobs
        return True

    async def _generate(self, context: _Context, sampling_params: dict[str, Any], budget: int, per_turn: int,
                        learner: bool, metrics: dict[str, Any], extra: dict[str, Any], priority: int) -> str | None:
        """One reply into ``context``; its text, or None when the budget leaves no room for a token."""
        room = budget - (len(context.mask) if learner else len(context.ids))
        if room <= 0:
            return None
        max_tokens = min(per_turn, room)
        with simple_timer("generate_sequences", metrics):
            output = await self.server_manager.generate(
                request_id=context.request_id, prompt_ids=list(context.ids),
                sampling_params={**sampling_params, "max_tokens": max_tokens}, priority=priority)
        if learner:
            _merge_server_fields(extra, output.extra_fields or {})
            if output.num_preempted is not None:
                metrics["num_preempted"] = max(0, metrics.get("num_preempted", 0)) + output.num_preempted
        tokens = [int(t) for t in output.token_ids][:max_tokens]  # a server must not exceed max_tokens; enforce it
        token_logprobs = None
        if context.logprobs is not None:
            token_logprobs = [float(x) for x in (output.log_probs or [])][:len(tokens)]
            if len(token_logprobs) != len(tokens):
                raise RuntimeError(f"the rollout server returned {len(token_logprobs)} log-probs for {len(tokens)} "
                                   "tokens although rollout.calculate_log_probs asked for them")
        merged, mask, logprobs = await self.ct_merge_assistant_token(
            context.ids, tokens, context.mask, context.logprobs, assistant_logprobs=token_logprobs)
        context.ids, context.mask = merged.token_ids, mask
        if logprobs is not None:
            context.logprobs = logprobs
        if self.turn_end is not None and (not tokens or tokens[-1] != self.turn_end):
            self._append_env_tokens(context, [self.turn_end])  # cut by max_tokens: close the turn
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        context.messages.append({"role": "assistant", "content": text})
        return text

    @staticmethod
    def _append_env_tokens(context: _Context, tokens: list[int]) -> None:
        context.ids = context.ids + tokens
        context.mask = context.mask + [0] * len(tokens)
        if context.logprobs is not None:
            context.logprobs = context.logprobs + [0.0] * len(tokens)

    def _output(self, learner: _Context, match: Match, metrics: dict[str, Any],
                extra: dict[str, Any]) -> AgentLoopOutput:
        n, limit = len(learner.mask), self.response_length
        prompt_ids = learner.ids[: len(learner.ids) - n]
        response_ids = learner.ids[len(learner.ids) - n:]
        metrics.setdefault("num_preempted", -1)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:limit],
            response_mask=learner.mask[:limit],
            response_logprobs=learner.logprobs[:limit] if learner.logprobs is not None else None,
            num_turns=len(learner.messages),
            metrics=metrics,
            extra_fields={**extra, "turn_scores": [], "tool_rewards": [], RECORD_FIELD: match.record.to_dict()},
        )


def _merge_server_fields(extra: dict[str, Any], fields: dict[str, Any]) -> None:
    """Keep the rollout server's per-sample fields as verl's ToolAgentLoop does (first call's, latest max step)."""
    if not extra:
        extra.update(fields)
    elif fields.get("max_global_steps") is not None:
        extra["max_global_steps"] = fields["max_global_steps"]
