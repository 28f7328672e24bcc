"""``verl-ext export``: write the same tasks the dataset serves to parquet (verl RL format or SFT)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from .envs.base import Task
from .envs.config import ConfigError
from .envs.system_prompt import system_prompt_of, with_system_prompt
from .games.demonstration import MoveChooser, demonstration_messages, engine_move, random_moves
from .mixture import SPLITS, EnvMixture, TaskRef, is_game, subsample

FORMATS = ("rl", "sft")
# where SFT answers come from: the adapter's reference (engine move, puzzle solution), a uniformly random
# legal move (a warm start that teaches the answer format and the rules but no strategy; game positions and whole
# games only), or rules: a random legal move where the task has legal moves (whole games: at every turn) and the
# reference elsewhere (a puzzle has no rules-only answer), so that one export serves a mixture of games and puzzles
ANSWER_SOURCES = ("reference", "random", "rules")
# rows per unit of work handed to an export worker process
_CHUNK_ROWS = 64
# the mixture of the running export, inherited by forked worker processes (adapters hold unpicklable games)
_WORKER_MIXTURE: EnvMixture | None = None


def load_env_section(config_path: str | None, overrides: list[str]) -> dict[str, Any]:
    """The ``data.env`` section from a YAML file (its ``env:`` key or the whole file) plus dotlist overrides."""
    from omegaconf import OmegaConf

    section = OmegaConf.create({})
    if config_path:
        if not Path(config_path).is_file():
            raise ConfigError(f"--config: no such file {config_path!r}")
        loaded = OmegaConf.load(config_path)
        section = loaded.get("env", loaded) if hasattr(loaded, "get") else loaded
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set: expected KEY=VALUE (e.g. openspiel.game_types=[hex]), got {item!r}")
    if overrides:
        section = OmegaConf.merge(section, OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_container(section, resolve=True)  # type: ignore[return-value]


def _row_seed(task: Task, split: str, index: int) -> int:
    """The seed of a row's random answers: the same on every export of this row."""
    return zlib.crc32(f"{split}|{index}|{task.case}|{task.seed}".encode())


def random_legal_answer(task: Task, split: str, index: int) -> str:
    """A uniformly random legal move of ``task`` as an answer, the same on every export of this row."""
    if not task.legal_moves:
        raise ConfigError(f"--answers random: task {index} of split {split!r} ({task.case!r}) has no legal moves "
                          "to choose from; random answers are for game positions only")
    return f"<answer>{random.Random(_row_seed(task, split, index)).choice(task.legal_moves)}</answer>"


def game_move_chooser(task: Task, split: str, index: int, answers: str) -> MoveChooser:
    """Who makes the moves of a game row's demonstration: the engine (``reference``) or, for ``random`` and
    ``rules`` (the same for a game: every turn has legal moves), a uniformly random legal move at every turn,
    seeded by the row."""
    return engine_move if answers == "reference" else random_moves(_row_seed(task, split, index))


def _row(mixture: EnvMixture, ref: TaskRef, split: str, fmt: str, index: int,
         answers: str = "reference") -> dict[str, Any] | None:
    """One exported row; None when an SFT row has no reference answer.

    SFT rows of single moves are the prompt and the engine's answer (``answers="random"``: a random legal
    move); SFT rows of full games are the trained seat's whole game conversation with the engine's move as
    every reply (``random``/``rules``: a random legal move at every turn; ``games/demonstration.py``), and their
    ``prompt`` is that conversation's first message.
    """
    row = mixture.row(ref, split, index)
    if fmt == "sft":
        task = mixture.build(ref)
        if is_game(task):
            adapter = mixture.adapters[ref.env]
            messages = demonstration_messages(adapter, task.case, task.seed, int(task.info["seat"]),
                                              game_move_chooser(task, split, index, answers))
            if messages is None:
                return None
            messages = list(with_system_prompt(messages, system_prompt_of(adapter)))  # as the agent loop plays
            row["prompt"] = messages[:1]
        else:
            if answers == "random" or (answers == "rules" and task.legal_moves):
                answer: str | None = random_legal_answer(task, split, index)
            else:
                answer = mixture.adapters[ref.env].reference_answer(task)
            if answer is None:
                return None
            messages = row["prompt"] + [{"role": "assistant", "content": answer}]
        row["response"] = messages[-1]["content"]
        row["messages"] = messages
    return row


def _rows_of_chunk(job: tuple[list[tuple[int, TaskRef]], str, str, str]) -> list[dict[str, Any] | None]:
    refs, split, fmt, answers = job
    assert _WORKER_MIXTURE is not None, "export workers are forked from a process that set the mixture"
    return [_row(_WORKER_MIXTURE, ref, split, fmt, i, answers) for i, ref in refs]


def build_rows(mixture: EnvMixture, split: str, fmt: str, max_samples: int = -1, seed: int = 0,
               progress: bool = True, jobs: int = 1, answers: str = "reference") -> tuple[list[dict[str, Any]], int]:
    """Rows of ``split`` in ``fmt``; returns (rows, tasks skipped for lack of a reference answer).

    ``answers`` (SFT only): ``reference`` (the adapter's engine move or solution), ``random`` (a random
    legal move per position, or at every turn of a whole game, seeded by the row) or ``rules`` (``random`` where
    the task has legal moves, the reference for puzzles).

    ``jobs`` > 1 builds rows in that many forked processes (engine moves for SFT rows are the slow part);
    the rows and their order do not depend on ``jobs``.
    """
    global _WORKER_MIXTURE
    if answers not in ANSWER_SOURCES:
        raise ConfigError(f"answers must be one of {ANSWER_SOURCES}, got {answers!r}")
    refs = list(enumerate(subsample(mixture.plan(split), max_samples, seed)))
    built: list[dict[str, Any] | None] = []
    with tqdm(total=len(refs), desc=f"{split}/{fmt}", unit="task", disable=not progress) as bar:
        if jobs <= 1 or len(refs) <= _CHUNK_ROWS:
            for i, ref in refs:
                built.append(_row(mixture, ref, split, fmt, i, answers))
                bar.update(1)
        else:
            chunks = [(refs[k:k + _CHUNK_ROWS], split, fmt, answers) for k in range(0, len(refs), _CHUNK_ROWS)]
            _WORKER_MIXTURE = mixture
            try:
                with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                    for rows in pool.map(_rows_of_chunk, chunks):
                        built += rows
                        bar.update(len(rows))
            finally:
                _WORKER_MIXTURE = None
    rows = [row for row in built if row is not None]
    return rows, len(built) - len(rows)


def write_parquet(rows: list[dict[str, Any]], out: Path) -> None:
    """Write atomically (temp file + rename) so an interrupted export leaves no partial file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-ext export", description=__doc__)
    parser.add_argument("--config", help="YAML with the env section (see data/*.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override, e.g. --set openspiel.game_types=[hex] (repeatable)")
    parser.add_argument("--split", choices=SPLITS, default="train")
    parser.add_argument("--format", choices=FORMATS, default="rl", help="rl: verl RL rows; sft: prompt/response")
    parser.add_argument("--answers", choices=ANSWER_SOURCES, default="reference",
                        help="SFT answers: reference (the engine's move / puzzle solution), random (a random legal "
                             "move: format and rules, no strategy; games only; whole-game rows get one at every "
                             "turn) or rules (random legal moves for game positions and whole games, reference "
                             "solutions for puzzles)")
    parser.add_argument("--max-samples", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the --max-samples subset")
    parser.add_argument("--out", required=True, help="output .parquet path")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes (Linux: forked); the output does not depend on it")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"verl-ext export: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    if args.answers != "reference" and args.format != "sft":
        print(f"verl-ext export: --answers {args.answers} applies to --format sft only", file=sys.stderr)
        return 2
    if args.jobs > 1 and "fork" not in multiprocessing.get_all_start_methods():
        print("verl-ext export: --jobs > 1 needs the 'fork' start method (Linux); exporting in one process",
              file=sys.stderr)
        args.jobs = 1
    try:
        mixture = EnvMixture(load_env_section(args.config, args.overrides), where="env")
        rows, skipped = build_rows(mixture, args.split, args.format, args.max_samples, args.seed,
                                   progress=not args.no_progress, jobs=args.jobs, answers=args.answers)
    except ConfigError as err:
        print(f"verl-ext export: {err}", file=sys.stderr)
        return 2
    if not rows:
        print("verl-ext export: no rows to write", file=sys.stderr)
        return 1
    write_parquet(rows, Path(args.out))
    note = f" ({skipped} tasks without a reference answer skipped)" if skipped else ""
    print(f"wrote {len(rows)} {args.format} rows of split {args.split!r} to {args.out}{note}")
    return 0
