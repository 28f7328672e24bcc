"""A whole game's tokens at rollout (verl's continuous-token helpers in our agent loop) are the tokens the
SFT warm start trained on (verl's MultiTurnSFTDataset on the exported demonstration): a model taught games by
SFT meets the same token sequence when it plays them in GRPO."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from test_game_agent_loop import game_config, game_row, game_tokenizer, episodes, play  # noqa: F401 (fixtures)
from verl_ext.games.agent_loop import game_setup
from verl_ext.games.demonstration import play_demonstration
from verl_ext.games.match import MatchRules


def engine_reply(call, episode) -> str:
    return f"<answer>{episode.reference_move()}</answer>"


@pytest.mark.parametrize("case,index", [("tic_tac_toe", 0), ("tic_tac_toe", 1), ("connect_four", 1)])
def test_rollout_tokens_equal_the_sft_rows_tokens(game_tokenizer, episodes, tmp_path, case, index):  # noqa: F811
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    config = game_config(game_tokenizer.name_or_path)
    row = game_row(config, case, index)
    output, record, _ = play(config, game_tokenizer, row, engine_reply, episodes)
    assert record.done and record.rejected == 0
    rollout = list(output.prompt_ids) + list(output.response_ids)

    # the same game as an SFT demonstration (what verl-ext export --format sft writes for this row)
    setup = game_setup(row["extra_info"])
    messages, demo = play_demonstration(setup.adapter.start_episode(setup.case, setup.seed, setup.seat),
                                        setup.settings.opponent_spec, MatchRules.from_settings(setup.settings))
    assert demo.to_dict() == {**record.to_dict(), "model_tokens": 0}
    path = tmp_path / "demo.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": messages}]), path)
    dataset = MultiTurnSFTDataset(str(path), game_tokenizer, OmegaConf.create(
        {"messages_key": "messages", "max_length": 8192, "pad_mode": "no_padding", "truncation": "error"}))
    sft = dataset[0]["input_ids"].tolist()
    # the SFT row ends with the template's newline after the last <|im_end|>; the rollout stops at <|im_end|>
    assert sft[:len(rollout)] == rollout and len(sft) - len(rollout) <= 1
    assert rollout == game_tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)[:len(rollout)]
