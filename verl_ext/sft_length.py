"""Pre-flight of ``train/scripts/sft.sh``: does every SFT row fit ``data.max_length`` (``SFT_MAX_LENGTH``)?

verl 0.9.1's multi-turn SFT dataset refuses a row longer than ``data.max_length`` (``truncation: error``) inside
``__getitem__``: the run stops when that row's batch comes up, which can be hours into an epoch. Whole-game rows
make this likely (a hanabi_small game is ~2,700 SmolLM2 tokens, up to ~4,300). This reads the rows once,
renders each conversation with the model's chat template and stops before the trainer starts.

    python -m verl_ext.sft_length data/sft_train.parquet data/sft_val.parquet --model MODEL_DIR --max-length 4096
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pyarrow.parquet as pq

BATCH_ROWS = 512  # rows rendered and tokenized at a time (bounded memory for large files)


@dataclass(frozen=True)
class LengthReport:
    """Token lengths of one parquet file's conversations against a limit."""

    path: Path
    rows: int
    longest: int
    over: int  # rows longer than the limit


def conversation_lengths(conversations: Sequence[list[dict[str, Any]]], tokenizer: Any) -> list[int]:
    """Tokens of each conversation as the chat template renders it (no generation prompt), as verl's SFT sees it."""
    texts = [tokenizer.apply_chat_template(messages, tokenize=False) for messages in conversations]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def measure(path: Path, tokenizer: Any, max_length: int, messages_key: str = "messages") -> LengthReport:
    """The length report of ``path``'s ``messages_key`` column."""
    parquet = pq.ParquetFile(path)
    if messages_key not in parquet.schema_arrow.names:
        raise ValueError(f"{path}: no {messages_key!r} column (columns: {', '.join(parquet.schema_arrow.names)}); "
                         "make SFT rows with `verl-ext export --format sft`")
    rows = longest = over = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[messages_key]):
        lengths = conversation_lengths(batch.column(0).to_pylist(), tokenizer)
        rows += len(lengths)
        longest = max([longest, *lengths])
        over += sum(length > max_length for length in lengths)
    return LengthReport(path, rows, longest, over)


def verdict(reports: Sequence[LengthReport], max_length: int) -> tuple[bool, str]:
    """(every row fits, one line saying so or naming the knob, the file, the count and the length needed)."""
    too_long = [r for r in reports if r.over]
    if not too_long:
        rows = sum(r.rows for r in reports)
        longest = max((r.longest for r in reports), default=0)
        return True, f"sft pre-flight: {rows:,} rows, the longest {longest:,} tokens <= SFT_MAX_LENGTH={max_length:,}"
    need = max(r.longest for r in too_long)
    files = "; ".join(f"{r.over:,} of {r.rows:,} rows of {r.path} (up to {r.longest:,} tokens)" for r in too_long)
    return False, (f"SFT_MAX_LENGTH={max_length:,} (data.max_length) is shorter than {files}: verl's SFT stops with "
                   f"an error when it reaches such a row. Set SFT_MAX_LENGTH>={need:,} (rows are not padded, so "
                   "short rows cost nothing more) or export shorter rows (fewer whole games: SFT_GAME_SHARE).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.sft_length", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="SFT parquet files (verl-ext export --format sft)")
    parser.add_argument("--model", required=True, help="model folder or id whose tokenizer and chat template count")
    parser.add_argument("--max-length", type=int, required=True, help="SFT_MAX_LENGTH (verl's data.max_length)")
    parser.add_argument("--messages-key", default="messages")
    args = parser.parse_args(argv)
    if args.max_length <= 0:
        parser.error(f"--max-length must be positive, got {args.max_length}")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError) as error:  # e.g. a hub id with no network: verl's own check still applies
        print(f"sft pre-flight: row lengths not checked, the tokenizer of {args.model!r} did not load ({error})",
              file=sys.stderr)
        return 0
    try:
        reports = [measure(path, tokenizer, args.max_length, args.messages_key) for path in args.files]
    except ValueError as error:
        print(f"sft pre-flight: {error}", file=sys.stderr)
        return 2
    fits, line = verdict(reports, args.max_length)
    print(line, file=sys.stdout if fits else sys.stderr)
    return 0 if fits else 2


if __name__ == "__main__":
    sys.exit(main())
