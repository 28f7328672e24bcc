"""One table of a rollout sweep (bench/speed/rollout_sweep.sh): per setting the step phases, generation throughput,
generation against the vLLM ceiling, and start-up.

    python bench/speed/sweep_table.py outputs/rollout_sweep --load realistic --settings bench/speed/rollout_sweep.settings \
        --out outputs/rollout_sweep/realistic.md

Reads ``<dir>/<name>/<load>/ours.json`` (bench/speed/summarize_run.py), ``startup.json`` (bench/startup/startup_breakdown.py)
and ``vllm.json`` (bench/speed/vllm_offline.py); a ``<dir>/<name>/FAILED`` marker or no result gives a row that says
so. Step numbers are medians over steps 2..N (``bench/speed/compare_speed.py``); the ceiling is the first ``vllm``
setting without arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_speed import fmt, ours_columns, write_table  # noqa: E402  (bench/ is not a package)

COLUMNS = ("step s", "generation s", "update s", "weight sync s", "generated tokens/s (generation)")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # ours | vllm
    environment: str
    arguments: str


def read_settings(path: Path) -> list[Setting]:
    """The settings file's rows (``name | kind | environment | arguments``); ValueError naming the line."""
    settings = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4 or parts[1] not in ("ours", "vllm") or not parts[0]:
            raise ValueError(f"{path}:{number}: expected 'name | ours|vllm | ENV=value ... | arguments', got {line!r}")
        settings.append(Setting(*parts))
    return settings


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def row(root: Path, load: str, setting: Setting, ceiling_s: float | None) -> dict[str, Any]:
    """One setting's numbers (None where it has none) and its status."""
    where = root / setting.name / load
    out: dict[str, Any] = {"setting": setting.name, "kind": setting.kind,
                           "change": " ".join(x for x in (setting.environment, setting.arguments) if x != "-") or
                           "(defaults)"}
    if setting.kind == "vllm":
        result = _load(where / "vllm.json")
        if result:
            out.update({"generation s": result["generation_s"], "generated tokens/s (generation)":
                        result["tokens_per_s"], "engine start s": result["engine_start_s"]})
    else:
        result = _load(where / "ours.json")
        if result:
            out.update(ours_columns(result["steps"]))
        startup = _load(where / "startup.json") or {}
        out["start-up to step 1 s"] = startup.get("launch_to_step1_start_s")
        out["engine start s"] = (startup.get("vllm_reported") or {}).get("vllm_engine_init_s")
        out["graph capture s"] = (startup.get("vllm_reported") or {}).get("vllm_graph_capture_s")
    gen = out.get("generation s")
    out["generation / vLLM"] = gen / ceiling_s if gen is not None and ceiling_s else None
    out["status"] = ("failed" if (root / setting.name / "FAILED").exists() else
                     "ok" if result else "no result")
    return out


def table(root: Path, load: str, settings: list[Setting]) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table and its rows."""
    ceiling = next((s for s in settings if s.kind == "vllm" and s.arguments == "-"), None)
    ceiling_result = _load(root / ceiling.name / load / "vllm.json") if ceiling else None
    ceiling_s = ceiling_result["generation_s"] if ceiling_result else None
    rows = [row(root, load, s, ceiling_s) for s in settings]
    keys = (*COLUMNS, "generation / vLLM", "start-up to step 1 s", "engine start s", "graph capture s")
    lines = [f"Rollout sweep, {load} load (medians over steps 2..N; ceiling: "
             f"{ceiling.name if ceiling else 'none'} {fmt(ceiling_s, missing='')} s)", "",
             "| setting | change | " + " | ".join(keys) + " | status |", "|---|---|" + "---:|" * len(keys) + "---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | `{r['change']}` | " + " | ".join(fmt(r.get(k), missing="") for k in keys) +
                     f" | {r['status']} |")
    return "\n".join(lines) + "\n", rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the sweep's OUT folder")
    parser.add_argument("--load", required=True, choices=["smoke", "realistic"])
    parser.add_argument("--settings", type=Path, default=Path(__file__).with_name("rollout_sweep.settings"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        settings = read_settings(args.settings)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    text, rows = table(args.root, args.load, settings)
    write_table(args.out, text, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
