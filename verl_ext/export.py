"""``verl-ext export``: write the same tasks the dataset serves to parquet (verl RL format or SFT)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from .envs.config import ConfigError
from .mixture import SPLITS, EnvMixture, subsample

FORMATS = ("rl", "sft")


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


def build_rows(mixture: EnvMixture, split: str, fmt: str, max_samples: int = -1, seed: int = 0,
               progress: bool = True) -> tuple[list[dict[str, Any]], int]:
    """Rows of ``split`` in ``fmt``; returns (rows, tasks skipped for lack of a reference answer)."""
    refs = subsample(mixture.plan(split), max_samples, seed)
    rows, skipped = [], 0
    for i, ref in enumerate(tqdm(refs, desc=f"{split}/{fmt}", unit="task", disable=not progress)):
        row = mixture.row(ref, split, i)
        if fmt == "sft":
            adapter = mixture.adapters[ref.env]
            answer = adapter.reference_answer(mixture.build(ref))
            if answer is None:
                skipped += 1
                continue
            row["response"] = answer
            row["messages"] = row["prompt"] + [{"role": "assistant", "content": answer}]
        rows.append(row)
    return rows, skipped


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
    parser.add_argument("--max-samples", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the --max-samples subset")
    parser.add_argument("--out", required=True, help="output .parquet path")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        mixture = EnvMixture(load_env_section(args.config, args.overrides), where="env")
        rows, skipped = build_rows(mixture, args.split, args.format, args.max_samples, args.seed,
                                   progress=not args.no_progress)
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
