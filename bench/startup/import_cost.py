"""What a fresh Python process pays to import what each of verl's Ray processes imports, alone and with N others
starting at once (a verl run starts 8 agent-loop workers together, and every start-up phase is a new process).

    python bench/startup/import_cost.py [--concurrency 1 8] [--repeat 2] --out import_cost.json

Each measurement starts fresh interpreters (``sys.executable -c "import M"``), which time their own import with
``time.perf_counter``; the first round of a module also pays the cold file cache, later rounds do not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# module -> the verl 0.9.1 process that imports it first
MODULES = {
    "torch": "every process",
    "transformers": "every process that loads a tokenizer or model",
    "verl.trainer.main_ppo": "TaskRunner (trainer/main_ppo.py)",
    "verl.workers.engine_workers": "FSDP actor workers (WorkerDict)",
    "verl.experimental.reward_loop": "reward loop workers",
    "verl.trainer.ppo.v1.agent_loop_tq": "agent-loop workers (8 by default)",
    "verl.workers.rollout.vllm_rollout.vllm_async_server": "vLLM server actor",
    "vllm": "vLLM server and its engine core process",
}
TIMER = "import time; t = time.perf_counter(); import {m}; print(time.perf_counter() - t)"


def import_seconds(module: str, concurrency: int) -> dict[str, float | list[float] | str]:
    """Start ``concurrency`` interpreters importing ``module`` at once: wall time and each one's import time, or
    the import's last error line (a module missing from this install is reported, not fatal)."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", TIMER.format(m=module)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(concurrency)]
    results = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    failed = [(err.strip().splitlines() or ["no output"])[-1] for (_, err), p in zip(results, procs) if p.returncode]
    if failed:
        return {"wall_s": round(wall, 2), "error": failed[0]}
    each = [float(out.strip().splitlines()[-1]) for out, _ in results]
    return {"wall_s": round(wall, 2), "import_s": [round(x, 2) for x in each],
            "median_import_s": round(statistics.median(each), 2)}


def markdown(rows: list[dict]) -> str:
    lines = ["| module | imported first by | processes at once | round | wall s | median import s |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        result = r.get("median_import_s", f"failed: {r.get('error', '')}")
        lines.append(f"| `{r['module']}` | {r['process']} | {r['concurrency']} | {r['round']} | {r['wall_s']} | "
                     f"{result} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeat", type=int, default=2, help="rounds per module and concurrency (first is cold)")
    parser.add_argument("--modules", nargs="+", default=list(MODULES), help="default: every process type's")
    parser.add_argument("--out", type=Path, required=True, help="JSON; a .md table is written next to it")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.concurrency) or args.repeat < 1:
        parser.error("--concurrency and --repeat take positive integers")
    rows = []
    for module in args.modules:
        for concurrency in args.concurrency:
            for round_ in range(1, args.repeat + 1):
                row = {"module": module, "process": MODULES.get(module, ""), "concurrency": concurrency,
                       "round": round_, **import_seconds(module, concurrency)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    args.out.with_suffix(".md").write_text(markdown(rows))
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
