"""CFR average policies of small poker games, solved once by OpenSpiel and cached on disk as JSON.

``cfr_policy(case, solver, iterations)`` returns an OpenSpiel ``TabularPolicy`` (``open_spiel.python.policy``)
computed by OpenSpiel's own solvers (``pyspiel.CFRSolver`` / ``pyspiel.CFRPlusSolver``, their average policy).
The first call writes ``$VERL_EXT_CACHE/cfr/<game>-<solver>-<iterations>-openspiel<version>.json`` (default
``~/.cache/verl-ext/cfr``): a pickle-free table ``{information state: [[action, probability], ...]}`` with the game
string, solver, iterations and OpenSpiel version it was computed under. A later call (any process) reads it back
after checking every field against the game: a file that does not match (other settings, a truncated write, edited
numbers, other information states or actions) is solved again and replaced, never trusted. Within a process the
policy is kept in memory.

Only two-player ``kuhn_poker`` and ``leduc_poker`` and the small limit hold'em ``card_games.SMALL_HOLDEM``
(``holdem_small``, 1,890 information states) are supported (``cfr_problem`` says why another game is not): CFR
needs imperfect information to be the right tool, and a full tabular solve of larger games (hold'em, hanabi,
liar's dice) does not fit a bot built on the fly.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pyspiel
from open_spiel.python import policy as os_policy

from .card_games import SMALL_HOLDEM

logger = logging.getLogger(__name__)

SOLVERS = ("cfr+", "cfr")
DEFAULT_SOLVER = "cfr+"
DEFAULT_ITERATIONS = 1000
MAX_ITERATIONS = 1_000_000
SUPPORTED_GAMES = ("kuhn_poker", "leduc_poker")
# Single configurations of other games small enough to solve here (canonical game strings).
SUPPORTED_CASES = (SMALL_HOLDEM,)
CACHE_FORMAT = "verl-ext-cfr-policy"
CACHE_VERSION = 1
PROBABILITY_TOLERANCE = 1e-6

_memo: dict[tuple[str, str, int, str], CFRPolicy] = {}
_memo_lock = threading.Lock()


def open_spiel_version() -> str:
    """The installed OpenSpiel version (part of every cache key)."""
    try:
        return version("open_spiel")
    except PackageNotFoundError:  # pragma: no cover - a source build without metadata
        return "unknown"


def cfr_problem(case: str) -> str | None:
    """Why a CFR policy of ``case`` is not offered (perfect information, a game too big to solve here, not two
    players), else None."""
    try:
        game = pyspiel.load_game(case)
    except Exception as err:  # pyspiel raises its own error types
        return f"cannot load the game: {err}"
    game_type = game.get_type()
    if game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION:
        return (f"{game_type.short_name} is a perfect-information game; CFR opponents are for the small poker "
                f"games ({', '.join(SUPPORTED_GAMES)})")
    if game_type.short_name not in SUPPORTED_GAMES and str(game) not in SUPPORTED_CASES:
        return (f"{game_type.short_name} is too big to solve with tabular CFR here; CFR opponents are offered for "
                f"{', '.join(SUPPORTED_GAMES)} and holdem_small")
    if game.num_players() != 2:
        return f"CFR opponents are offered for two-player games, {case!r} has {game.num_players()} players"
    return None


def check_solver(solver: str, iterations: int, where: str) -> None:
    """Raise ``ValueError`` naming ``where`` for an unknown solver or a bad number of iterations."""
    if solver not in SOLVERS:
        raise ValueError(f"{where}: unknown CFR solver {solver!r} (choose from {', '.join(SOLVERS)})")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 0 < iterations <= MAX_ITERATIONS:
        raise ValueError(f"{where}: CFR iterations must be an integer in 1..{MAX_ITERATIONS}, got {iterations!r}")


def default_cache_dir() -> Path:
    """``$VERL_EXT_CACHE/cfr``, by default ``~/.cache/verl-ext/cfr``."""
    root = os.environ.get("VERL_EXT_CACHE") or str(Path.home() / ".cache" / "verl-ext")
    return Path(root).expanduser() / "cfr"


def cache_path(case: str, solver: str, iterations: int, directory: Path | None = None) -> Path:
    """The cache file of (game string, solver, iterations, OpenSpiel version); a game string with parameters gets
    a checksum of the exact string in its name."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", case).strip("_")
    if slug != case:
        slug = f"{slug}-{zlib.crc32(case.encode()):08x}"
    tag = "cfrplus" if solver == "cfr+" else solver
    name = f"{slug}-{tag}-{iterations}-openspiel{open_spiel_version()}.json"
    return (directory or default_cache_dir()) / name


@dataclass(frozen=True)
class CFRPolicy:
    """A CFR average policy of ``case``; ``source`` says whether this process solved it or read the cache."""

    case: str
    solver: str
    iterations: int
    policy: os_policy.TabularPolicy
    path: Path
    source: str  # "solved" | "cache"

    @property
    def label(self) -> str:
        return f"{self.solver} ({self.iterations} iterations)"


def solve(case: str, solver: str = DEFAULT_SOLVER, iterations: int = DEFAULT_ITERATIONS) -> os_policy.TabularPolicy:
    """OpenSpiel's ``CFRPlusSolver`` or ``CFRSolver`` run for ``iterations``; its average policy as a python
    ``TabularPolicy``."""
    check_solver(solver, iterations, "solve")
    game = pyspiel.load_game(case)
    cfr = pyspiel.CFRPlusSolver(game) if solver == "cfr+" else pyspiel.CFRSolver(game)
    for _ in range(iterations):
        cfr.evaluate_and_update_policy()
    return os_policy.pyspiel_policy_to_python_policy(game, cfr.tabular_average_policy())


def policy_table(tabular: os_policy.TabularPolicy) -> dict[str, list[list[float]]]:
    """``{information state: [[action, probability], ...]}`` over the legal actions of each state (JSON-ready)."""
    table = {}
    for key, index in tabular.state_lookup.items():
        legal = [int(a) for a in range(tabular.legal_actions_mask.shape[1]) if tabular.legal_actions_mask[index, a]]
        table[key] = [[a, float(tabular.action_probability_array[index, a])] for a in legal]
    return table


def table_to_policy(game: pyspiel.Game, table: Any) -> os_policy.TabularPolicy:
    """A ``TabularPolicy`` of ``game`` from ``policy_table``'s format; ``ValueError`` unless the table has exactly
    the game's information states, each with exactly its legal actions and finite probabilities in [0, 1] that
    sum to 1 (within 1e-6; then renormalised)."""
    tabular = os_policy.TabularPolicy(game)
    if not isinstance(table, dict):
        raise ValueError(f"policy: expected a mapping of information states, got {type(table).__name__}")
    missing = set(tabular.state_lookup) - set(table)
    extra = set(table) - set(tabular.state_lookup)
    if missing or extra:
        raise ValueError(f"policy: {len(missing)} information states missing and {len(extra)} unknown "
                         f"(e.g. {sorted(missing or extra)[0]!r})")
    for key, index in tabular.state_lookup.items():
        entry = table[key]
        legal = [a for a in range(tabular.legal_actions_mask.shape[1]) if tabular.legal_actions_mask[index, a]]
        try:
            actions = [int(pair[0]) for pair in entry]
            probs = [float(pair[1]) for pair in entry]
        except (TypeError, ValueError, IndexError, KeyError):
            raise ValueError(f"policy[{key!r}]: expected [[action, probability], ...], got {entry!r}") from None
        if sorted(actions) != legal or len(set(actions)) != len(actions):
            raise ValueError(f"policy[{key!r}]: actions {actions} are not the legal actions {legal}")
        if not all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs):
            raise ValueError(f"policy[{key!r}]: probabilities {probs} are not all finite numbers in [0, 1]")
        total = sum(probs)
        if abs(total - 1.0) > PROBABILITY_TOLERANCE:
            raise ValueError(f"policy[{key!r}]: probabilities sum to {total!r}, not 1")
        row = tabular.action_probability_array[index]
        row[:] = 0.0
        for action, prob in zip(actions, probs):
            row[action] = prob / total
    return tabular


def _header(case: str, solver: str, iterations: int) -> dict[str, Any]:
    return {"format": CACHE_FORMAT, "version": CACHE_VERSION, "game": case, "solver": solver,
            "iterations": iterations, "open_spiel": open_spiel_version()}


def read_cache(path: Path, case: str, solver: str, iterations: int) -> os_policy.TabularPolicy:
    """The cached policy at ``path``; ``ValueError`` (or ``OSError``) when it is missing or does not match."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    expected = _header(case, solver, iterations)
    for key, value in expected.items():
        if data.get(key) != value:
            raise ValueError(f"{key} is {data.get(key)!r}, expected {value!r}")
    return table_to_policy(pyspiel.load_game(case), data.get("policy"))


def write_cache(path: Path, case: str, solver: str, iterations: int, tabular: os_policy.TabularPolicy) -> None:
    """Write the policy atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**_header(case, solver, iterations), "policy": policy_table(tabular)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load_or_solve(case: str, solver: str, iterations: int, path: Path) -> CFRPolicy:
    if path.is_file():
        try:
            tabular = read_cache(path, case, solver, iterations)
            return CFRPolicy(case, solver, iterations, tabular, path, "cache")
        except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
            logger.warning("CFR cache %s does not match %s %s x%d (%s); solving again", path, case, solver,
                           iterations, err)
    started = time.perf_counter()
    solved = solve(case, solver, iterations)
    # the table exactly as a later read of the file gives it (renormalised rows), so that a process that solved and
    # one that read the cache play and measure the same numbers to the last bit
    tabular = table_to_policy(pyspiel.load_game(case), policy_table(solved))
    logger.info("solved %s with %s x%d in %.1f s", case, solver, iterations, time.perf_counter() - started)
    try:
        write_cache(path, case, solver, iterations, tabular)
    except OSError as err:  # a read-only home: the policy is still usable, only not kept
        logger.warning("cannot write the CFR cache %s (%s); the policy is kept in memory only", path, err)
    return CFRPolicy(case, solver, iterations, tabular, path, "solved")


def cfr_policy(case: str, solver: str = DEFAULT_SOLVER, iterations: int = DEFAULT_ITERATIONS,
               directory: Path | None = None) -> CFRPolicy:
    """The CFR average policy of ``case`` from this process's memory, the disk cache, or OpenSpiel's solver (in
    that order). Processes sharing a cache folder solve a game once: a file lock is held while one solves."""
    check_solver(solver, iterations, "cfr_policy")
    problem = cfr_problem(case)
    if problem:
        raise ValueError(f"no CFR policy for {case!r}: {problem}")
    path = cache_path(case, solver, iterations, directory)
    key = (case, solver, iterations, str(path))
    with _memo_lock:
        if key in _memo:
            return _memo[key]
        try:
            from filelock import FileLock

            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock"):
                result = _load_or_solve(case, solver, iterations, path)
        except OSError:  # no writable cache folder: solve in memory
            result = _load_or_solve(case, solver, iterations, path)
        _memo[key] = result
        return result


def forget_memory() -> None:
    """Drop the in-process policies (tests; the disk cache is kept)."""
    with _memo_lock:
        _memo.clear()
