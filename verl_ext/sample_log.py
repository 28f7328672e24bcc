"""Optional per-sample log of what ``compute_score`` saw: one JSON line per scored response.

verl 0.9.1's v1 trainer does not put custom reward fields into its training metrics or rollout dumps, so
legal-move rate, format rate and our own time per sample would otherwise be invisible. When
``VERL_EXT_SAMPLE_LOG`` names a file (the train scripts set it next to the run's log), every reward call
appends ``{"time", "split", "env", "case"}``, the task's ``seed`` and row ``index`` (from ``extra_info``: they
pair a held-out position's replies across validation passes), a game row's ``seat`` and every metric of
``verl_ext.reward.METRIC_KEYS`` (score, valid, format_ok, failed, reward_ms, dataset_ms, and the full-game counts:
game, win, draw, loss, ...).

Reply text: ``VERL_EXT_SAMPLE_TEXTS`` samples (default 8; 0: none) of every step (validation: of every validation
pass), shared among the cases seen so far (``texts // cases`` of each case, spread over its samples of the step:
``_keeps_text``; with more cases than texts, one sample of ``texts`` cases a step, in turn), also keep the reply,
cut to ``VERL_EXT_SAMPLE_TEXT_CHARS`` characters (default 2,000: head and tail around a ``[... N chars cut ...]``
marker; full-game rows, whose reply is the whole conversation, keep mostly the tail), with ``reply_chars`` (its
length) and ``reply_cut`` (characters cut). Lines also carry ``block`` (the step or validation pass, counted in
this log) and, for training samples when ``VERL_EXT_SAMPLES_PER_STEP`` is known, ``step`` (verl's step;
``sample_steps.py`` says how). ``verl-ext samples <log>`` prints the replies.

Reward workers are separate processes: each line is one ``O_APPEND`` write (lines without text stay smaller than
``PIPE_BUF``; a line with a reply is ~3-25 kB, one write that Linux file systems append whole), so lines from
different workers do not interleave. Logging never raises.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from . import sample_steps
from .games import RECORD_FIELD
from .sample_text import DEFAULT_CHARS, as_text, cut

ENV_VAR = "VERL_EXT_SAMPLE_LOG"
TEXTS_VAR = "VERL_EXT_SAMPLE_TEXTS"
CHARS_VAR = "VERL_EXT_SAMPLE_TEXT_CHARS"
PER_STEP_VAR = "VERL_EXT_SAMPLES_PER_STEP"
OFFSET_VAR = "VERL_EXT_SAMPLE_STEP_OFFSET"
DEFAULT_TEXTS = 8
_MAX_LINE_BYTES = 4096  # POSIX PIPE_BUF: smaller appends are atomic
_JSON_BYTES_PER_CHAR = 12  # the most one character can take in JSON (ensure_ascii: two 6-byte \u escapes)
GAME_TAIL_SHARE = 0.8  # a full game's reply is the conversation: its end says how the game ended
logger = logging.getLogger(__name__)
_disabled = False
_steps_disabled = False
_warned: set[str] = set()


def _int_setting(name: str, default: int) -> int:
    """A non-negative integer from the environment; a bad value warns once and gives ``default``."""
    raw = os.environ.get(name, "")
    try:
        return max(0, int(raw)) if raw.strip() else default
    except ValueError:
        if name not in _warned:
            _warned.add(name)
            logger.warning("%s=%r is not an integer; using %d", name, raw, default)
        return default


def _position(path: str, split: str, now: float, case: str = "") -> tuple[dict[str, int], bool]:
    """This sample's ``block``/``step`` fields and whether it keeps its reply text (``_keeps_text``)."""
    global _steps_disabled
    texts = _int_setting(TEXTS_VAR, DEFAULT_TEXTS)
    if _steps_disabled:
        return {}, False
    per_step = _int_setting(PER_STEP_VAR, 0) if split == "train" else 0
    try:
        position = sample_steps.claim(path + ".count", split or "?", now, per_step or None, case)
    except Exception:  # a file system without flock, a read-only folder: keep the metric lines, drop the rest
        _steps_disabled = True
        logger.warning("could not count samples in %s.count; sample steps and reply texts are off for this process",
                       path, exc_info=True)
        return {}, False
    fields = {"block": position.block}
    if per_step:
        fields["step"] = position.block + _int_setting(OFFSET_VAR, 0)
    return fields, _keeps_text(position, texts, per_step)


def _keeps_text(position: sample_steps.Position, texts: int, per_step: int = 0) -> bool:
    """The step's (or pass's) ``texts`` are shared among the cases seen so far, so that a case whose samples are
    scored last (connect_four games end after tic_tac_toe ones) still shows its replies: ``texts // cases`` of
    each, or with more cases than texts, one sample of ``texts`` cases a step, in turn.

    Which samples of a case: whole games are scored as they end, so the first ones scored in a step are its
    shortest games (kept that way, the 2026-11-29 connect_four texts averaged 7.0 moves against 11.8 for all games,
    and 65 % of the kept tic_tac_toe games were losses against 24 %). So the kept samples are spread evenly over
    the case's expected arrivals in the block, from an offset that turns with the block: a systematic sample of
    all its games. Expected: the case's count in the block before (validation passes are alike), else
    ``per_step // cases`` (training's first step), else unknown (a first validation pass), and then the first
    arrivals are kept."""
    if texts <= 0:
        return False
    expected = position.case_before or (max(1, per_step // position.cases) if per_step else 0)
    if position.cases <= texts:
        quota = texts // position.cases
        if not expected:
            return position.case_index < quota
        stride = max(1, expected // quota)
        return (position.case_index % stride == position.block % stride
                and position.case_index // stride < quota)
    turns = -(-position.cases // texts)  # steps until every case has had its turn
    if (position.case_rank + position.block) % turns:
        return False
    # one arrival of the case, at a rank that moves with the step (the block times a large prime, modulo the
    # expected count): spread over the step's arrivals, deterministic, no state
    return position.case_index == ((position.block * 7919 + position.case_rank) % expected if expected else 0)


def _reply_fields(info: Mapping[str, Any], reply: Any) -> dict[str, Any]:
    text = as_text(reply)
    share = GAME_TAIL_SHARE if info.get("mode") == "game" else 0.5
    kept, removed = cut(text, _int_setting(CHARS_VAR, DEFAULT_CHARS), share)
    return {"reply": kept, "reply_chars": len(text), "reply_cut": removed}


def _opponent(info: Mapping[str, Any]) -> str | None:
    """The opponent a game row played (its record's ``opponent``), so a mixture's games can be told apart."""
    game = info.get(RECORD_FIELD) if info.get("mode") == "game" else None
    value = game.get("opponent") if isinstance(game, Mapping) else None
    return value[:64] if isinstance(value, str) else None


def record(info: Mapping[str, Any], result: Mapping[str, float], reply: Any = None) -> None:
    """Append one sample line when ``VERL_EXT_SAMPLE_LOG`` is set; ``reply`` is the decoded response (kept for
    a few samples per step). After a failure to write, warn once and stop."""
    global _disabled
    path = os.environ.get(ENV_VAR)
    if not path or _disabled:
        return
    try:
        now = time.time()
        split = str(info.get("split", ""))[:16]
        entry: dict[str, Any] = {"time": now, "split": split, "env": str(info.get("env", ""))[:64],
                                 "case": str(info.get("case", ""))[:200], **{k: float(v) for k, v in result.items()}}
        opponent = _opponent(info)
        if opponent is not None:
            entry["opponent"] = opponent
        # which task (pairs a position's replies across validation passes) and, in game rows, the policy's seat
        for key in ("seed", "index", "seat"):
            value = info.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                entry[key] = value
        fields, keep_text = _position(path, split, now, entry["case"])
        entry.update(fields)
        limit = _MAX_LINE_BYTES
        if keep_text:
            try:
                entry.update(_reply_fields(info, reply))
                limit += _JSON_BYTES_PER_CHAR * len(entry["reply"])
            except Exception:  # the text only: the sample's metrics are still logged
                logger.warning("could not keep a reply's text in the sample log", exc_info=True)
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        if len(line) > limit:
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except Exception:  # never let bookkeeping take training down
        _disabled = True
        logger.warning("could not append to %s=%s; per-sample logging is off for this process",
                       ENV_VAR, path, exc_info=True)
