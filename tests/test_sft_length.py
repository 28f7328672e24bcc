"""The SFT pre-flight (verl_ext/sft_length.py): a row longer than SFT_MAX_LENGTH is found before verl's trainer
starts (verl 0.9.1 raises on it only when the row's batch comes up), with the knob, the file and the length to set;
sft.sh runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ext.sft_length import conversation_lengths, main, measure, verdict
from verl_ext.tiny_model import build_qwen2

REPO = Path(__file__).resolve().parents[1]


def write_rows(path: Path, conversations: list[list[dict[str, str]]]) -> Path:
    pq.write_table(pa.table({"messages": conversations}), path)
    return path


def conversation(turns: int) -> list[dict[str, str]]:
    messages = []
    for turn in range(turns):
        messages += [{"role": "user", "content": f"Yes No 1 2 3 4 turn {turn}"},
                     {"role": "assistant", "content": "<answer>a1</answer>"}]
    return messages


def test_lengths_are_the_chat_templates_rendering(tokenizer):
    short, long = conversation(1), conversation(12)
    lengths = conversation_lengths([short, long], tokenizer)
    assert lengths[0] == len(tokenizer(tokenizer.apply_chat_template(short, tokenize=False),
                                       add_special_tokens=False)["input_ids"])
    assert lengths[1] > 6 * lengths[0]


def test_a_row_over_the_limit_is_named_with_the_length_to_set(tokenizer, tmp_path):
    rows = [conversation(1)] * 5 + [conversation(12)]
    path = write_rows(tmp_path / "sft_train.parquet", rows)
    longest = max(conversation_lengths(rows, tokenizer))
    short = conversation_lengths([conversation(1)], tokenizer)[0]
    report = measure(path, tokenizer, max_length=short)
    assert (report.rows, report.longest, report.over) == (6, longest, 1)
    fits, line = verdict([report], short)
    assert not fits
    assert f"SFT_MAX_LENGTH={short:,}" in line and f"1 of 6 rows of {path}" in line
    assert f"SFT_MAX_LENGTH>={longest:,}" in line
    fits, line = verdict([measure(path, tokenizer, max_length=longest)], longest)
    assert fits and "6 rows" in line


def test_the_cli_exits_2_on_a_long_row_and_0_when_all_fit(tokenizer_dir, tokenizer, tmp_path, capsys):
    train = write_rows(tmp_path / "train.parquet", [conversation(1), conversation(8)])
    val = write_rows(tmp_path / "val.parquet", [conversation(1)])
    longest = max(conversation_lengths([conversation(8)], tokenizer))
    assert main([str(train), str(val), "--model", str(tokenizer_dir), "--max-length", str(longest - 1)]) == 2
    assert "train.parquet" in capsys.readouterr().err
    assert main([str(train), str(val), "--model", str(tokenizer_dir), "--max-length", str(longest)]) == 0


def test_rows_without_messages_are_refused_by_name(tokenizer_dir, tmp_path, capsys):
    path = tmp_path / "rl.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "hi"}]]}), path)
    assert main([str(path), "--model", str(tokenizer_dir), "--max-length", "64"]) == 2
    assert "no 'messages' column" in capsys.readouterr().err


def test_an_unloadable_tokenizer_is_said_and_leaves_the_check_to_verl(tmp_path, capsys):
    path = write_rows(tmp_path / "train.parquet", [conversation(1)])
    assert main([str(path), "--model", str(tmp_path / "no-model-here"), "--max-length", "64"]) == 0
    assert "not checked" in capsys.readouterr().err


@pytest.mark.parametrize("limit_delta, code", [(-1, 2), (0, 0)])
def test_sft_sh_stops_before_the_trainer_on_a_long_row(tokenizer_dir, tmp_path, limit_delta, code):
    """sft.sh runs the pre-flight after its file checks; a failing one ends the script before torchrun starts
    (PYTHON here is a wrapper that runs everything but the torchrun launch, which it only reports)."""
    train = write_rows(tmp_path / "train.parquet", [conversation(2)])
    val = write_rows(tmp_path / "val.parquet", [conversation(1)])
    model = shutil.copytree(tokenizer_dir, tmp_path / "model")  # sft.sh's launch pre-flight reads config.json
    build_qwen2(model, "tiny", model)
    from transformers import AutoTokenizer

    longest = conversation_lengths([conversation(2)], AutoTokenizer.from_pretrained(model))[0]
    wrapper = tmp_path / "python"
    wrapper.write_text('#!/usr/bin/env bash\nif [[ "$2" == torch.distributed.run ]]; then echo "trainer: $*"; exit 0; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PYTHON": str(wrapper), "MODEL_PATH": str(model), "SFT_TRAIN_FILE": str(train),
           "SFT_VAL_FILE": str(val), "SFT_MAX_LENGTH": str(longest + limit_delta), "LOGGERS": "[console]"}
    done = subprocess.run(["bash", "train/scripts/sft.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == code, done.stderr
    assert ("trainer:" in done.stdout) == (code == 0)
    if code:
        assert "SFT_MAX_LENGTH" in done.stderr
