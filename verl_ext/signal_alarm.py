"""Console alarms on the per-step learning-signal and collapse metrics (``verl_ext.group_stats``).

Three alarms, each one line on stdout, printed when it starts and again every ``REPEAT_STEPS`` steps while it lasts:

- no learning signal: ``signal/group_share`` < ``NO_SIGNAL_SHARE`` on the first step or for ``PATIENCE`` steps
  running. With ``SIGNAL_CHECK=abort`` (``VERL_EXT_SIGNAL_CHECK``) a first step whose share is below
  ``ABORT_SHARE`` stops the run (``NoLearningSignal``) after its metrics are logged.
- policy collapse, for ``PATIENCE`` steps running, while at least half the replies are well formed (else the
  favourite "answer" is no answer, which the first alarm covers): ``collapse/answer_entropy`` below
  ``ENTROPY_FRACTION`` of the first step's (when that was at least ``MIN_BASELINE_ENTROPY``),
  ``collapse/favourite_share`` > ``FAVOURITE_SHARE``, or ``collapse/distinct_answers`` < ``DISTINCT_ANSWERS``.
  A condition the first step already meets is the starting policy's, not a collapse of this run (a cold start
  taught one answer there, e.g. the engine's opening: every whole board game starts from the same empty board): one
  line says so at the first step, and that condition counts again only once it has stopped holding. In a batch of
  single moves and whole games (``TASK_MODE=mixed``) the three read the single moves' own metrics
  (``collapse/moves/*``, ``verl_ext.group_stats``): the games' fixed openings, pooled in, would move the mean with
  the batch's share of games.
- replies cut at the response cap: ``signal/replies_at_cap`` >= ``CAP_SHARE`` for ``PATIENCE`` steps running
  (a cut reply is judged as it stands: an answer not yet written earns nothing).

The "first step" is the first one this process trains (step 1, or the first after a resume).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARK = "[verl-ext] signal"
MODE_VAR = "VERL_EXT_SIGNAL_CHECK"
MODES = ("warn", "abort", "off")
NO_SIGNAL_SHARE = 0.1
ABORT_SHARE = 0.02
PATIENCE = 3
REPEAT_STEPS = 25
ENTROPY_FRACTION = 0.25
MIN_BASELINE_ENTROPY = 0.1
FAVOURITE_SHARE = 0.8
DISTINCT_ANSWERS = 1.5
MIN_FORMAT_RATE = 0.5
CAP_SHARE = 0.2
CAP_CURES = ("cures: a larger response budget (MAX_RESPONSE_LENGTH, data.max_response_length), or a prompt / cold "
             "start that answers sooner")
NO_SIGNAL_CURES = "cures: cold start (SFT), a different prompt or system prompt, easier tasks"
COLLAPSE_CURES = ("cures: an entropy bonus (actor_rollout_ref.actor.entropy_coeff), clip-higher "
                  "(actor_rollout_ref.actor.clip_ratio_high), a KL anchor (KL_LOSS_COEF), a lower LR")
DOCS = "docs/training.md, 'Learning signal and collapse'"


class NoLearningSignal(RuntimeError):
    """``SIGNAL_CHECK=abort`` and the first step's groups carry (almost) no signal."""


@dataclass
class _Streak:
    """How many steps running a condition has held, and the step it was last printed at."""

    steps: int = 0
    printed_at: int | None = None

    def update(self, holds: bool, step: int, patience: int) -> bool:
        """Count this step; True when a line is due (the streak reached ``patience``, or ``REPEAT_STEPS`` later)."""
        if not holds:
            self.steps, self.printed_at = 0, None
            return False
        self.steps += 1
        if self.steps < patience:
            return False
        if self.printed_at is None or step - self.printed_at >= REPEAT_STEPS:
            self.printed_at = step
            return True
        return False


@dataclass
class SignalAlarm:
    """Watches one run's step metrics; ``observe`` returns the lines to print and the 0/1 alarm metrics."""

    mode: str = "warn"
    baseline_entropy: float | None = None
    first_step: int | None = None
    no_signal: _Streak = field(default_factory=_Streak)
    collapse: _Streak = field(default_factory=_Streak)
    at_cap: _Streak = field(default_factory=_Streak)
    # collapse conditions ("favourite", "distinct") the first step already met: the starting policy's
    held_from_start: set[str] = field(default_factory=set)

    def observe(self, step: int, metrics: dict[str, float]) -> tuple[list[str], dict[str, float]]:
        """Lines to print for this step's metrics, and ``signal/alarm`` / ``collapse/alarm`` / ``signal/cap_alarm`` (1
        while it holds)."""
        first = self.first_step is None
        if first:
            self.first_step = step
            entropy = metrics.get(_collapse_key(metrics, "answer_entropy"))
            self.baseline_entropy = entropy if entropy is not None and entropy >= MIN_BASELINE_ENTROPY else None
        lines, flags = [], {}
        share = metrics.get("signal/group_share")
        if share is not None:
            low = share < NO_SIGNAL_SHARE
            flags["signal/alarm"] = float(low)
            if self.no_signal.update(low, step, 1 if first else PATIENCE):
                lines.append(_no_signal_line(step, metrics, self.no_signal.steps))
        found = self._collapse_reasons(metrics)
        if first and found:
            self.held_from_start = set(found)
            lines.append(f"{MARK}: step {step}: the starting policy already meets the collapse threshold: "
                         f"{'; '.join(found.values())} — fixed before this run (a cold start that taught one answer, "
                         f"e.g. the engine's opening on an empty board), and GRPO learns nothing from those choices; "
                         f"the collapse alarm counts them once they vary ({DOCS})")
        self.held_from_start &= set(found)  # a condition that stopped holding counts from now on
        reasons = [text for key, text in found.items() if key not in self.held_from_start]
        if "collapse/answer_entropy" in metrics:
            due = self.collapse.update(bool(reasons), step, PATIENCE)
            flags["collapse/alarm"] = float(self.collapse.steps >= PATIENCE)
            if due:
                lines.append(f"{MARK}: step {step}: policy collapse for {self.collapse.steps} steps: "
                             f"{'; '.join(reasons)} — {COLLAPSE_CURES} ({DOCS})")
        at_cap = metrics.get("signal/replies_at_cap")
        if at_cap is not None:
            holds = at_cap >= CAP_SHARE
            due = self.at_cap.update(holds, step, PATIENCE)
            flags["signal/cap_alarm"] = float(self.at_cap.steps >= PATIENCE)
            if due:
                cap = metrics.get("signal/response_cap")
                budget = f"the {cap:.0f}-token response cap" if cap else "the response cap"
                lines.append(f"{MARK}: step {step}: {at_cap:.0%} of replies reached {budget} for "
                             f"{self.at_cap.steps} steps (>= {CAP_SHARE:.0%}): they are cut, answer or not — "
                             f"{CAP_CURES} ({DOCS})")
        return lines, flags

    def should_abort(self, step: int, metrics: dict[str, float]) -> str:
        """The reason to stop the run after this step ("" to go on): abort mode, first step, share ~0."""
        share = metrics.get("signal/group_share")
        if self.mode != "abort" or step != self.first_step or share is None or share >= ABORT_SHARE:
            return ""
        return (f"SIGNAL_CHECK=abort: step {step} has no learning signal (signal/group_share {share:.3f} < "
                f"{ABORT_SHARE}): {_equal_share(metrics)}; {NO_SIGNAL_CURES} ({DOCS}); SIGNAL_CHECK=warn trains on")

    def _collapse_reasons(self, metrics: dict[str, float]) -> dict[str, str]:
        """The collapse conditions this step meets, by name (entropy, favourite, distinct), each with its line."""
        if metrics.get("signal/format_rate", 1.0) < MIN_FORMAT_RATE:
            return {}
        reasons = {}
        entropy = metrics.get(_collapse_key(metrics, "answer_entropy"))
        if entropy is not None and self.baseline_entropy is not None \
                and entropy < ENTROPY_FRACTION * self.baseline_entropy:
            reasons["entropy"] = (f"answer entropy {entropy:.3f} nats < {ENTROPY_FRACTION:g} x the first step's "
                                  f"{self.baseline_entropy:.3f}")
        favourite = metrics.get(_collapse_key(metrics, "favourite_share"))
        if favourite is not None and favourite > FAVOURITE_SHARE:
            reasons["favourite"] = (f"{favourite:.0%} of a group's replies name its favourite answer "
                                    f"(> {FAVOURITE_SHARE:.0%})")
        distinct = metrics.get(_collapse_key(metrics, "distinct_answers"))
        if distinct is not None and distinct < DISTINCT_ANSWERS:
            reasons["distinct"] = f"{distinct:.2f} distinct answers per group (< {DISTINCT_ANSWERS:g})"
        return reasons


def _collapse_key(metrics: dict[str, float], name: str) -> str:
    """``collapse/moves/<name>`` where the step's batch mixed single moves and whole games, else ``collapse/<name>``."""
    return f"collapse/moves/{name}" if f"collapse/moves/{name}" in metrics else f"collapse/{name}"


def _equal_share(metrics: dict[str, float]) -> str:
    share, groups = metrics.get("signal/group_share", 0.0), int(metrics.get("signal/groups", 0))
    rates = ", ".join(f"{name} {metrics[key]:.0%}" for name, key in (("format", "signal/format_rate"),
                                                                      ("valid", "signal/valid_rate"))
                      if key in metrics)
    return f"{1 - share:.0%} of {groups} groups have equal rewards" + (f" ({rates})" if rates else "")


def _no_signal_line(step: int, metrics: dict[str, float], steps: int) -> str:
    running = f" for {steps} steps" if steps > 1 else ""
    return (f"{MARK}: step {step}: no learning signal{running}: {_equal_share(metrics)}, "
            f"signal/group_share {metrics['signal/group_share']:.3f} < {NO_SIGNAL_SHARE} — {NO_SIGNAL_CURES} "
            f"({DOCS})")
