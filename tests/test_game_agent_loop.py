"""Contract tests of the full-game agent loop against the installed verl 0.9.1, without a GPU.

The loop class is built the way verl's AgentLoopWorker builds it (hydra.utils.instantiate of the entry in
verl_ext/games/agent_loops.yaml, verl's composed config, a real HF tokenizer, model_type qwen2; the loop
swaps verl's model-type continuous-token builder for the chat template's, turn_tokens.py); rewards go
through verl's AgentLoopWorker (in-process, no Ray) and RewardLoopWorker, and a mixed batch through
AgentLoopWorker.generate_sequences itself. A scripted token server stands in for vLLM: it answers each
generate() call with token ids from a policy that can see the live OpenSpiel state, honours max_tokens, and
returns log-probs and the fields verl's LLMServerClient adds.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import hydra
import numpy as np
import pytest
from omegaconf import OmegaConf
from open_spiel.python.algorithms import minimax
from torch.utils.data import DataLoader
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, ToolListWrap
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.utils.dataset.rl_dataset import collate_fn
from verl.workers.rollout.replica import TokenOutput

from verl_ext.dataset import DynamicEnvDataset
from verl_ext.envs.card_games import NAMED_CASES, RANK_NAMES
from verl_ext.envs.openspiel_env import OpenSpielAdapter, load_game
from verl_ext.games import AGENT_LOOP_CONFIG, GAME_AGENT_NAME, RECORD_FIELD
from verl_ext.games.agent_loop import GameAgentLoop, game_setup
from verl_ext.games.match import GameRecord, Match, MatchRules
from verl_ext.patches.move_credit import plan_of, reply_spans
from verl_ext.mixture import EnvMixture
from verl_ext.reward import METRIC_KEYS
from verl_ext.tiny_model import build_qwen2, build_tokenizer

from test_verl_contract import compose_verl_config

PROMPT_LEN, RESPONSE_LEN = 512, 1536
ANSWER = re.compile(r"<answer>(.*?)</answer>")


@pytest.fixture(scope="module")
def game_tokenizer(tmp_path_factory):
    """A tokenizer trained on the games played here (prompts compress as with the project's tiny models), saved
    with a tiny random Qwen2 config and weights: verl's AgentLoopWorker reads the model folder (model_type qwen2;
    the game loop takes its turn boundary from the chat template whatever the type); no weights are run."""
    from transformers import AutoTokenizer

    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe", "connect_four", "leduc_poker"],
                                        "num_tasks_per_case": 24}})
    texts = [mixture.build(ref).messages[0]["content"] for ref in mixture.plan("train")]
    path = build_tokenizer(tmp_path_factory.mktemp("game_model"), texts + ["<answer>x(1,1)</answer> I play"], 1024)
    build_qwen2(path, "tiny", path)
    return AutoTokenizer.from_pretrained(path)


def game_config(tokenizer_path, response_length: int = RESPONSE_LEN,
                game_types: tuple[str, ...] = ("tic_tac_toe", "connect_four", "leduc_poker"), **game):
    env = {"game_types": list(game_types), "num_tasks_per_case": 4,
           "task_mode": "game", "game": {"opponent": "random", "illegal_retries": 1, **game}}
    overrides = [f"+data.env.openspiel={_hydra_value(env)}"]
    return compose_verl_config([
        "data.custom_cls.path=pkg://verl_ext.dataset", "data.custom_cls.name=DynamicEnvDataset",
        "data.train_files=env://train", "data.val_files=env://val",
        f"data.max_prompt_length={PROMPT_LEN}", f"data.max_response_length={response_length}",
        "reward.custom_reward_function.path=pkg://verl_ext.reward",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.model.path={tokenizer_path}",
        "actor_rollout_ref.rollout.name=vllm",  # only read for its config schema: no server is started
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}",
        *overrides,
    ])


def _hydra_value(value) -> str:
    """A Python value as a Hydra override value (dicts, lists, strings quoted)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        return "'" + value + "'"
    return str(value)


@dataclass
class Call:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    player: int | None
    tokens: list[int] = field(default_factory=list)
    logprobs: bool = False  # whether the caller asked for the sampled tokens' log-probs


class ScriptedServer:
    """Stands in for verl's LLMServerClient: ``policy(call, episode)`` gives a reply (text, closed with the
    end-of-turn token like a model that stops, or raw token ids); at most ``max_tokens`` come back."""

    def __init__(self, tokenizer, policy: Callable, episodes: list) -> None:
        self.tokenizer, self.policy, self.episodes = tokenizer, policy, episodes
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls: list[Call] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        episode = self.episodes[-1] if self.episodes else None
        player = episode.current_player() if episode is not None and not episode.is_over() else None
        call = Call(request_id, list(prompt_ids), int(sampling_params.get("max_tokens", RESPONSE_LEN)), player)
        reply = self.policy(call, episode)
        tokens = reply if isinstance(reply, list) else self.tokenizer.encode(reply, add_special_tokens=False) + [
            self.end]
        call.tokens = tokens[: call.max_tokens]
        call.logprobs = bool(sampling_params.get("logprobs"))
        self.calls.append(call)
        logprobs = [-0.01 * (i + 1) for i in range(len(call.tokens))] if call.logprobs else None
        return TokenOutput(token_ids=call.tokens, log_probs=logprobs, stop_reason="completed",
                           extra_fields={"global_steps": 7, "min_global_steps": 7, "max_global_steps": 7})


def answer(move: str) -> str:
    return f"Let me look at the board. <answer>{move}</answer>"


def first_move(call, episode) -> str:
    return answer(episode.legal_moves()[0])


def best_move(call, episode) -> str:
    """Perfect tic-tac-toe play (alpha-beta search of the live state)."""
    player = episode.current_player()
    _, action = minimax.alpha_beta_search(episode.game, state=episode.state.clone(), maximizing_player_id=player)
    return answer(episode.state.action_to_string(player, action))


@pytest.fixture
def episodes(monkeypatch):
    """Every episode the loop starts (the last one is the game being played), so policies see the live state."""
    started = []
    original = OpenSpielAdapter.start_episode

    def recording(self, case, seed, seat):
        episode = original(self, case, seed, seat)
        started.append(episode)
        return episode

    monkeypatch.setattr(OpenSpielAdapter, "start_episode", recording)
    return started


def game_row(config, case: str, index: int) -> dict:
    mixture = EnvMixture(OmegaConf.to_container(config.data.env, resolve=True))
    ref = next(r for r in mixture.plan("train") if r.case == case and r.index == index)
    row = mixture.row(ref, "train", 0)
    row["raw_prompt"] = row.pop("prompt")
    return row


def make_loop(config, tokenizer, server):
    """The agent loop exactly as verl's AgentLoopWorker instantiates it for a row with our agent_name."""
    entries = {e.name: e for e in OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)}
    return hydra.utils.instantiate(
        config=entries[GAME_AGENT_NAME], trainer_config=DictConfigWrap(config=config), server_manager=server,
        tokenizer=tokenizer, processor=None, hf_model_type="qwen2", dataset_cls=DynamicEnvDataset,
        data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))


def play(config, tokenizer, row, policy, episodes, sampling_params=None):
    server = ScriptedServer(tokenizer, policy, episodes)

    async def run():
        loop = make_loop(config, tokenizer, server)
        assert isinstance(loop, GameAgentLoop)
        params = sampling_params or {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        kwargs = {k: v for k, v in row.items() if k != "agent_name"}
        return await loop.run(params, **kwargs)

    output = asyncio.run(run())
    return output, GameRecord.from_dict(output.extra_fields[RECORD_FIELD]), server


def check_invariants(output, server, tokenizer, response_length: int = RESPONSE_LEN) -> list:
    """Shapes, mask 1 exactly on the learner's generated tokens, log-probs aligned; returns the learner calls."""
    n = len(output.response_ids)
    assert 0 < n <= response_length and len(output.response_mask) == n == len(output.response_logprobs)
    assert len(output.prompt_ids) <= PROMPT_LEN and set(output.response_mask) <= {0, 1}
    learner_calls = [c for c in server.calls if c.prompt_ids[: len(output.prompt_ids)] == output.prompt_ids]
    model_tokens = [t for c in learner_calls for t in c.tokens]
    masked = [t for t, m in zip(output.response_ids, output.response_mask) if m]
    assert masked == model_tokens[: len(masked)]  # exactly the generated tokens, in order (the last may be cut)
    for (start, end), call in zip(reply_spans(output.response_mask), learner_calls):
        assert output.response_ids[start:end] == call.tokens[: end - start]
    for i, (m, lp) in enumerate(zip(output.response_mask, output.response_logprobs)):
        assert (lp < 0) if m else (lp == 0.0), i  # model tokens carry the rollout's log-probs, env tokens 0
    return learner_calls


def test_registration_file_names_the_loop_and_rows_pick_it(game_tokenizer):
    config = game_config(game_tokenizer.name_or_path)
    entries = OmegaConf.load(AGENT_LOOP_CONFIG)
    assert [e.name for e in entries] == [GAME_AGENT_NAME]
    assert hydra.utils.get_class(entries[0]._target_) is GameAgentLoop
    row = game_row(config, "tic_tac_toe", 1)
    assert row["agent_name"] == GAME_AGENT_NAME and row["extra_info"]["mode"] == "game"
    assert row["extra_info"]["seat"] == 1 and row["data_source"] == "openspiel-game/tic_tac_toe"


@pytest.mark.parametrize("index", [0, 1])
def test_transcript_mask_and_replies_of_a_whole_game(game_tokenizer, episodes, index):
    config = game_config(game_tokenizer.name_or_path)
    row = game_row(config, "connect_four", index)
    output, record, server = play(config, game_tokenizer, row, first_move, episodes)
    assert record.done and record.truncated is None and record.seat == index % 2
    learner_calls = check_invariants(output, server, game_tokenizer)
    assert len(learner_calls) == record.model_turns == record.model_moves > 3
    assert record.model_tokens == sum(output.response_mask) == sum(len(c.tokens) for c in learner_calls)
    # decoding each model span gives exactly the model's reply
    for (start, end), call in zip(reply_spans(output.response_mask), learner_calls):
        assert game_tokenizer.decode(output.response_ids[start:end]) == game_tokenizer.decode(call.tokens)
    # prompt + response decode to the chat transcript of the game, replayed from its seed with the same replies
    replies = iter([game_tokenizer.decode(c.tokens, skip_special_tokens=True) for c in learner_calls])
    setup = game_setup(row["extra_info"])
    replay = Match(setup.adapter.start_episode(setup.case, setup.seed, setup.seat), setup.settings.opponent_spec,
                   MatchRules.from_settings(setup.settings))
    while replay.next_request() is not None:
        replay.submit(next(replies))
    assert replay.record.to_dict() == {**record.to_dict(), "model_tokens": 0}
    transcript = game_tokenizer.apply_chat_template(list(replay.conversation(setup.seat)), tokenize=False)
    assert game_tokenizer.decode(output.prompt_ids + output.response_ids) + "\n" == transcript
    assert game_tokenizer.decode(output.prompt_ids).endswith("<|im_start|>assistant\n")
    assert output.num_turns == len(replay.conversation(setup.seat))
    assert output.extra_fields["min_global_steps"] == output.extra_fields["max_global_steps"] == 7


def _expected_reward(episode, seat: int) -> float:
    game = load_game(episode.case)
    lo, hi = game.min_utility(), game.max_utility()
    return (episode.state.returns()[seat] - lo) / (hi - lo)


def test_reward_is_the_games_outcome_through_verls_reward_loop(game_tokenizer, episodes):
    """Scripted wins, losses and draws: the sample's reward is the seat's normalised return read from
    OpenSpiel's terminal state, computed by verl's reward loop calling our compute_score."""
    seen = set()
    for index, policy, opponent in [(0, best_move, "random"), (2, best_move, "random"), (1, best_move, "random"),
                                    (0, first_move, "mcts:100"), (1, first_move, "mcts:100"),
                                    (0, best_move, "mcts:300")]:
        cfg = game_config(game_tokenizer.name_or_path, opponent=opponent)
        row = game_row(cfg, "tic_tac_toe", index)
        output, record, _ = play(cfg, game_tokenizer, row, policy, episodes)
        episode = episodes[-1]
        assert episode.state.is_terminal() and record.truncated is None and record.forfeit is None
        scored = score_with_verl(cfg, output, row)
        assert scored["reward_score"] == pytest.approx(_expected_reward(episode, row["extra_info"]["seat"]))
        info = scored["reward_extra_info"]
        assert tuple(info) == METRIC_KEYS and info["game"] == 1.0 and info[record.result] == 1.0
        assert info["win"] + info["draw"] + info["loss"] + info["truncated"] == 1.0
        assert info["model_tokens"] == sum(output.response_mask) and info["failed"] == 0.0
        seen.add(record.result)
    assert seen == {"win", "draw", "loss"}


def test_v1_trainer_fields_of_a_scored_game(game_tokenizer, episodes):
    """What verl's v1 worker (AgentLoopWorkerTQ) stores per sample: ``AgentLoopOutput.as_dict()`` plus the row,
    stacked by ``list_of_dict_to_tensordict``; the reward sits on the last response token."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    config = game_config(game_tokenizer.name_or_path)
    fields = []
    for index in (0, 1):
        row = game_row(config, "tic_tac_toe", index)
        output, record, _ = play(config, game_tokenizer, row, best_move, episodes)
        scored = score_with_verl(config, output, row)
        output.reward_score = scored["reward_score"]
        output.extra_fields["reward_extra_info"] = scored["reward_extra_info"]
        field = output.as_dict()
        field.update({k: v for k, v in row.items() if k != "agent_name"})
        field["loss_mask"] = field["response_mask"]
        assert field["rm_scores"][-1] == scored["reward_score"] and field["rm_scores"][:-1].abs().sum() == 0
        assert field["extra_fields"]["min_global_steps"] == 7  # the v1 trainer's staleness tags read these
        fields.append(field)
    stacked = list_of_dict_to_tensordict(fields)
    assert stacked.batch_size == (2,) and stacked["responses"].is_nested
    assert [e["reward_extra_info"]["game"] for e in stacked["extra_fields"]] == [1.0, 1.0]


def score_with_verl(config, output, row) -> dict:
    """verl's per-sample reward path: AgentLoopWorker._compute_score hands the output (its extra fields
    included) to a RewardLoopWorker, whose naive manager calls our compute_score."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = _worker(config, RewardLoopWorker(config))
        output = output.model_copy(deep=True)
        kwargs = {k: v for k, v in row.items() if k != "agent_name"}
        loop.run_until_complete(worker._compute_score([output], kwargs=kwargs))
        return {"reward_score": output.reward_score, "reward_extra_info": output.extra_fields["reward_extra_info"]}
    finally:
        asyncio.set_event_loop(None)
        loop.close()


class _LocalRemote:
    """``handle.compute_score.remote(data)`` for an in-process RewardLoopWorker (no Ray)."""

    def __init__(self, method) -> None:
        self.method = method

    def remote(self, *args, **kwargs):
        return self.method(*args, **kwargs)


class _LocalHandle:
    def __init__(self, reward_worker: RewardLoopWorker) -> None:
        self.compute_score = _LocalRemote(reward_worker.compute_score)


def _worker(config, reward_worker, server=None) -> AgentLoopWorker:
    """verl's AgentLoopWorker itself, in-process (no Ray): ``server`` as its LLM client, ``reward_worker`` behind
    its reward-worker handle. Its constructor loads our agent-loop file from agent_loop_config_path."""
    return AgentLoopWorker(config, server, None, [_LocalHandle(reward_worker)])


@pytest.mark.parametrize("policy_name", ["illegal", "junk"])
def test_illegal_or_unparseable_replies_retry_then_forfeit(game_tokenizer, episodes, policy_name):
    config = game_config(game_tokenizer.name_or_path, illegal_retries=2)
    row = game_row(config, "tic_tac_toe", 0)
    policies = {"illegal": lambda call, ep: answer("x(9,9)"), "junk": lambda call, ep: "I resign, no answer tag"}
    output, record, server = play(config, game_tokenizer, row, policies[policy_name], episodes)
    check_invariants(output, server, game_tokenizer)
    assert record.result == "loss" and record.forfeit == ("illegal_move" if policy_name == "illegal"
                                                          else "no_answer_tag")
    assert record.model_turns == record.rejected == 3 and record.retries == 2 and record.model_moves == 0
    text = game_tokenizer.decode(output.response_ids)
    assert text.count("That reply was rejected") == 2  # the corrections are environment tokens in the transcript
    assert score_with_verl(config, output, row)["reward_score"] == 0.0


def fixes_after_correction(tokenizer):
    """A policy that answers the illegal x(9,9), then the best move once the last prompt is a correction."""

    def policy(call, episode):
        text = tokenizer.decode(call.prompt_ids)
        return best_move(call, episode) if text.rstrip().endswith(
            "<|im_start|>assistant") and "rejected" in text[-400:] else answer("x(9,9)")

    return policy


def test_a_retry_can_save_the_turn(game_tokenizer, episodes):
    config = game_config(game_tokenizer.name_or_path, illegal_retries=1, legal_weight=0.2)
    row = game_row(config, "tic_tac_toe", 0)

    output, record, server = play(config, game_tokenizer, row, fixes_after_correction(game_tokenizer), episodes)
    assert record.forfeit is None and record.result in ("win", "draw")
    assert record.rejected == record.retries == record.model_moves and record.model_turns == 2 * record.model_moves
    reward = score_with_verl(config, output, row)["reward_score"]
    outcome = 1.0 if record.result == "win" else 0.5
    assert reward == pytest.approx(0.8 * outcome + 0.2 * 0.5)  # legal_weight x (legal replies / replies)


def test_each_reply_is_one_run_of_the_mask_and_carries_its_value_for_move_credit(game_tokenizer, episodes):
    """game.move_credit (verl_ext/patches/move_credit.py) finds the replies as runs of 1s in the response mask and
    pairs them in order with the record's reply_values: through the agent loop, rejected replies included, they
    match one to one."""
    config = game_config(game_tokenizer.name_or_path, illegal_retries=1, move_credit=1.5)
    row = game_row(config, "tic_tac_toe", 0)

    output, record, _ = play(config, game_tokenizer, row, fixes_after_correction(game_tokenizer), episodes)
    assert record.move_credit == 1.5 and record.rejected == record.model_moves > 0
    assert len(reply_spans(output.response_mask)) == record.model_turns == len(record.reply_values)
    assert record.reply_values[0::2] == [0] * record.rejected  # every other reply was the rejected x(9,9)
    assert record.reply_values[1::2] == [1] * record.model_moves  # the engine's best moves keep the value
    plan = plan_of(["g"], [output.extra_fields])
    assert plan is not None and plan.values == [record.reply_values] and plan.weights == [1.5]


def test_budget_truncation_is_marked_and_scored_as_configured(game_tokenizer, episodes):
    budget = 400
    config = game_config(game_tokenizer.name_or_path, response_length=budget, truncated_reward=0.25)
    row = game_row(config, "connect_four", 0)
    output, record, server = play(config, game_tokenizer, row, first_move, episodes)
    check_invariants(output, server, game_tokenizer, budget)
    assert record.truncated == "response_budget" and record.result is None and record.outcome == "truncated"
    assert not episodes[-1].is_over()
    scored = score_with_verl(config, output, row)
    assert scored["reward_score"] == 0.25 and scored["reward_extra_info"]["truncated"] == 1.0
    assert scored["reward_extra_info"]["win"] == 0.0
    # a move cap truncates the same way, however the game stands
    capped = game_config(game_tokenizer.name_or_path, max_moves=5)
    output, record, _ = play(capped, game_tokenizer, game_row(capped, "connect_four", 0), first_move, episodes)
    assert record.truncated == "move_cap" and record.moves == 5
    assert score_with_verl(capped, output, game_row(capped, "connect_four", 0))["reward_score"] == 0.0
    # capped before the trained seat (seat 1) ever moved: still a well-formed sample with nothing to train on
    early = game_config(game_tokenizer.name_or_path, max_moves=1)
    row = game_row(early, "connect_four", 1)
    output, record, server = play(early, game_tokenizer, row, first_move, episodes)
    assert record.truncated == "move_cap" and record.model_turns == 0 and server.calls == []
    assert output.response_mask == [0] and game_tokenizer.decode(output.response_ids) == "<|im_end|>"
    assert output.prompt_ids == game_tokenizer.apply_chat_template(row["raw_prompt"], add_generation_prompt=True,
                                                                   tokenize=True)["input_ids"]


def test_long_replies_are_cut_at_the_turn_cap_and_the_turn_is_closed(game_tokenizer, episodes):
    config = game_config(game_tokenizer.name_or_path, max_tokens_per_turn=12, illegal_retries=0)
    row = game_row(config, "tic_tac_toe", 0)
    rambling = "I am thinking about this position very carefully and at length " * 20
    output, record, server = play(config, game_tokenizer, row, lambda call, ep: rambling + answer("x(1,1)"),
                                  episodes)
    assert [c.max_tokens for c in server.calls] == [12] and len(server.calls[0].tokens) == 12
    assert record.forfeit == "no_answer_tag"
    end = game_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert output.response_ids[-1] == end and output.response_mask[-1] == 0  # closed by the environment
    assert sum(output.response_mask) == 12


def test_self_play_opponent_uses_its_own_context_and_is_never_trained_on(game_tokenizer, episodes):
    config = game_config(game_tokenizer.name_or_path, opponent="self")
    row = game_row(config, "connect_four", 1)  # the trained policy moves second

    def policy(call, episode):
        marker = "TRAINED" if call.player == 1 else "MIRROR"
        return f"{marker} <answer>{episode.legal_moves()[-1 if call.player == 1 else 0]}</answer>"

    output, record, server = play(config, game_tokenizer, row, policy, episodes)
    learner_calls = check_invariants(output, server, game_tokenizer)
    opponent_calls = [c for c in server.calls if c not in learner_calls]
    assert record.opponent_replies == len(opponent_calls) > 0 and record.opponent_fallbacks == 0
    assert len({c.request_id for c in opponent_calls}) == 1 and {c.request_id for c in learner_calls}.isdisjoint(
        {c.request_id for c in opponent_calls})
    text = game_tokenizer.decode(output.prompt_ids + output.response_ids)
    assert "TRAINED" in text and "MIRROR" not in text
    assert "as player 0 of 2" not in text  # the opponent's prompts are its own, not in the sample
    assert all("MIRROR" in game_tokenizer.decode(c.prompt_ids) or i == 0 for i, c in enumerate(opponent_calls))


def test_a_mixture_of_opponents_draws_one_per_row_and_the_record_names_it(game_tokenizer, episodes):
    """``game.opponent: random:1,self:1`` through verl's Hydra config: each row plays the opponent its seed draws."""
    config = game_config(game_tokenizer.name_or_path, opponent="random:1,self:1")
    assert config.data.env.openspiel.game.opponent == "random:1,self:1"
    settings = EnvMixture(OmegaConf.to_container(config.data.env, resolve=True)).adapters["openspiel"].game_settings
    labels = []
    for index in range(4):
        row = game_row(config, "tic_tac_toe", index)
        drawn = settings.opponent_for(row["extra_info"]["seed"]).label
        output, record, server = play(config, game_tokenizer, row, first_move, episodes)
        check_invariants(output, server, game_tokenizer)
        assert record.opponent == drawn and record.done
        assert (record.opponent_replies > 0) == (drawn == "self")  # only a self-play opponent asks the server
        labels.append(record.opponent)
    assert set(labels) == {"random", "self"}


def test_the_same_seed_replays_the_same_game(game_tokenizer, episodes):
    config = game_config(game_tokenizer.name_or_path)
    rng_policy = lambda call, ep: answer(random.Random(len(call.prompt_ids)).choice(ep.legal_moves()))  # noqa: E731
    runs = [play(config, game_tokenizer, game_row(config, "leduc_poker", i), rng_policy, episodes)
            for i in (1, 1, 3)]
    assert runs[0][0].response_ids == runs[1][0].response_ids and runs[0][1] == runs[1][1]
    assert runs[0][0].prompt_ids == runs[1][0].prompt_ids
    assert runs[0][0].response_ids != runs[2][0].response_ids
    # leduc: the learner's prompts show its own card, never the opponent's
    episode, seat = episodes[-1], runs[2][1].seat
    text = game_tokenizer.decode(runs[2][0].prompt_ids + runs[2][0].response_ids)
    own, other = (RANK_NAMES[episode.state.private_card(p) // 2] for p in (seat, 1 - seat))  # Leduc: 2 suits
    assert set(re.findall(r"Your card: (\w+)\.", text)) == {own}
    if other != own:  # the opponent's card is never named as a private card
        assert f"Your card: {other}." not in text


@pytest.mark.parametrize("opponent", ["random", "self"])
@pytest.mark.parametrize("name", ["kuhn_poker", "holdem_small", "hanabi_small"])
def test_whole_poker_hands_and_hanabi_games_through_the_agent_loop(game_tokenizer, episodes, name, opponent):
    """The named card cases as verl samples, both seats: the mask covers the model's replies only, verl's reward
    path pays the seat's return over the utility range (Hanabi: the team score over its maximum); a stream of
    random token ids forfeits (Hanabi: scores 0) and never raises."""
    case, budget = NAMED_CASES[name], 16384
    game = load_game(case)
    config = game_config(game_tokenizer.name_or_path, response_length=budget, game_types=(name,), opponent=opponent)
    random_legal = lambda call, ep: answer(random.Random(len(call.prompt_ids)).choice(ep.legal_moves()))  # noqa: E731
    for index in (0, 1):
        row = game_row(config, case, index)
        output, record, server = play(config, game_tokenizer, row, random_legal, episodes)
        check_invariants(output, server, game_tokenizer, budget)
        assert record.done and record.truncated is None and record.seat == index and record.forfeit is None
        assert record.model_moves == record.model_turns == len([c for c in server.calls if c.tokens]) - (
            record.opponent_replies)
        low, high = game.min_utility(), game.max_utility()
        scored = score_with_verl(config, output, row)
        assert scored["reward_score"] == pytest.approx((record.returns[index] - low) / (high - low))
        noise = lambda call, ep: [random.Random(len(call.prompt_ids)).randrange(len(game_tokenizer))  # noqa: E731
                                  for _ in range(40)]
        output, record, server = play(config, game_tokenizer, row, noise, episodes)
        check_invariants(output, server, game_tokenizer, budget)
        assert record.done and record.model_moves == 0
        assert score_with_verl(config, output, row)["reward_score"] == (
            0.0 if record.model_turns else pytest.approx((record.returns[index] - low) / (high - low)))


HOSTILE = {
    "empty": [],
    "huge": "x" * 5000,
    "many_tags": "".join(f"<answer>x({i // 3},{i % 3})</answer>" for i in range(9)),
    "hedge": "<answer>x(0,0) or x(1,1)</answer>",
    "unicode": "<answer>\u0445(1,1)</answer> \U0001f600 \u202e",
    "nested": "<answer><answer>x(1,1)</answer></answer>",
}


@pytest.mark.parametrize("name", [*HOSTILE, "binary", "special_tokens"])
def test_hostile_replies_never_raise_and_never_pay(game_tokenizer, episodes, name):
    config = game_config(game_tokenizer.name_or_path, illegal_retries=1, max_tokens_per_turn=64,
                         format_weight=0.1, legal_weight=0.1)
    row = game_row(config, "tic_tac_toe", 0)
    vocab = len(game_tokenizer)
    special = [game_tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|endoftext|>", "<|im_end|>")]

    def hostile(call, episode):
        if name == "binary":
            return [random.Random(len(call.prompt_ids)).randrange(vocab) for _ in range(80)]
        if name == "special_tokens":
            return special * 30
        return HOSTILE[name]

    output, record, server = play(config, game_tokenizer, row, hostile, episodes)
    check_invariants(output, server, game_tokenizer)
    assert record.forfeit is not None and record.model_moves == 0 and record.rejected == 2
    scored = score_with_verl(config, output, row)
    # at most the format share, and only for replies the strict parser accepts (a hedge is one answer, illegal)
    assert record.format_ok == (2 if name == "hedge" else 0)
    assert scored["reward_score"] == pytest.approx(0.1 * record.format_ok / record.model_turns)
    assert scored["reward_extra_info"]["failed"] == 0.0 and scored["reward_extra_info"]["valid"] == 0.0


@pytest.mark.parametrize("rollout_log_probs", [False, True])  # the train scripts' default, and bypass mode's
def test_a_mixed_batch_goes_through_verls_agent_loop_worker(game_tokenizer, episodes, rollout_log_probs):
    """Single-move and full-game rows in one batch: verl's collate_fn and DataProto, then verl's own
    AgentLoopWorker.generate_sequences: agent_name routing (ours registered from the YAML file, verl's
    single_turn_agent), sampling params, per-sample reward through the reward worker, padding and batching;
    with and without the rollout's log-probs (rollout.calculate_log_probs, ROLLOUT_LOG_PROBS)."""
    config = game_config(game_tokenizer.name_or_path)
    OmegaConf.update(config, "data.env.openspiel.task_mode", "mixed", force_add=True)
    OmegaConf.update(config, "actor_rollout_ref.rollout.calculate_log_probs", rollout_log_probs)
    dataset = DynamicEnvDataset(["env://train"], game_tokenizer, config.data)
    batch = next(iter(DataLoader(dataset, batch_size=12, shuffle=False, collate_fn=collate_fn)))
    proto = DataProto.from_single_dict(batch)
    names = list(proto.non_tensor_batch["agent_name"])
    modes = [info.get("mode") for info in proto.non_tensor_batch["extra_info"]]
    assert set(names) == {"single_turn_agent", GAME_AGENT_NAME}
    assert [n == GAME_AGENT_NAME for n in names] == [m == "game" for m in modes]

    def policy(call, episode):  # single-move prompts carry their own legal moves; games use the live state
        text = game_tokenizer.decode(call.prompt_ids)
        moves = re.findall(r"Legal moves \(write yours exactly as listed\): (.*)", text)[-1].split(", ")
        return answer(moves[0])

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        server = ScriptedServer(game_tokenizer, policy, episodes)
        worker = _worker(config, RewardLoopWorker(config), server)
        out = loop.run_until_complete(worker.generate_sequences(proto))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert len(server.calls) > 12  # games take several calls each
    assert out.batch["responses"].shape == (12, RESPONSE_LEN) and out.batch["prompts"].shape == (12, PROMPT_LEN)
    assert out.meta_info["reward_extra_keys"] == list(METRIC_KEYS)
    assert all(call.logprobs is rollout_log_probs for call in server.calls)
    if rollout_log_probs:  # the learner's tokens carry the server's log-probs, everything else 0
        logprobs = out.batch["rollout_log_probs"]
        assert logprobs.shape == (12, RESPONSE_LEN)
        assert bool(((logprobs < 0) == out.batch["response_mask"].bool()).all())
    else:
        assert "rollout_log_probs" not in out.batch.keys()
    rm = out.batch["rm_scores"]
    game = np.asarray(out.non_tensor_batch["game"], dtype=float)
    assert list(game) == [float(m == "game") for m in modes]
    for i, is_game in enumerate(game):
        score = float(rm[i].sum())
        assert score == pytest.approx(float(out.non_tensor_batch["score"][i]))
        last = int(out.batch["attention_mask"][i, PROMPT_LEN:].sum()) - 1
        assert float(rm[i, last]) == pytest.approx(score)  # the reward sits on the sample's last token
        if not is_game:
            assert score == pytest.approx(1.0)  # a legal single move under reward_mode=legal
            assert int(out.batch["response_mask"][i].sum()) == int(out.batch["attention_mask"][i, PROMPT_LEN:].sum())
        else:
            record = GameRecord.from_dict(out.non_tensor_batch[RECORD_FIELD][i])
            assert out.non_tensor_batch["win"][i] == float(record.result == "win")
            assert int(out.batch["response_mask"][i].sum()) == record.model_tokens > 0
            assert out.non_tensor_batch["__num_turns__"][i] == 2 * record.model_turns  # user + assistant per turn


def test_a_row_that_is_not_a_game_is_refused_clearly(game_tokenizer):
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 2}})
    row = mixture.row(mixture.plan("train")[0], "train", 0)
    with pytest.raises(ValueError, match="not a full-game row"):
        game_setup(row["extra_info"])
