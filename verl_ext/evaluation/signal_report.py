"""What ``verl-ext signal`` reports: per-case and pooled tallies of scored GRPO groups, the no-signal warning, and
the markdown report.

A GRPO group is the ``n`` replies to one prompt. Its advantages are ``(r - mean) / (std + eps)``: when every reward
in the group is the same, every advantage is 0 and the group teaches nothing. The share of groups whose rewards are
not all equal is therefore the share of the batch GRPO can learn from.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..group_stats import EQUAL_REWARDS, rewards_differ
from .stats import mean_or_none, proportion

# Share of replies at the token cap above which the warning names a larger response budget.
CAP_SHARE_NOTE = 0.2
EXAMPLE_CHARS = 400


@dataclass(frozen=True)
class ScoredReply:
    """One sampled reply (or whole game) and what the training reward made of it (``tokens`` is None when not
    known; ``moves``, for a whole game, every answer the policy named in it, None for a single reply)."""

    reply: str
    score: float
    format_ok: bool
    valid: bool
    failed: bool
    tokens: int | None
    moves: tuple[str, ...] | None = None


def has_signal(scores: Sequence[float]) -> bool:
    """Whether a group's rewards are not all equal, i.e. differ by more than ``EQUAL_REWARDS`` (then GRPO's
    advantages are not all 0)."""
    if len(scores) < 2:
        raise ValueError(f"a GRPO group needs at least 2 rewards, got {len(scores)}")
    return rewards_differ(scores)


def no_signal_kind(scores: Sequence[float]) -> str | None:
    """None for a group with signal; else why not: ``all_zero``, ``all_full`` (every reply scores >= 1) or
    ``all_equal`` (some other common value)."""
    if has_signal(scores):
        return None
    value = scores[0]
    return "all_zero" if value <= EQUAL_REWARDS else "all_full" if value >= 1.0 - EQUAL_REWARDS else "all_equal"


@dataclass
class GroupTally:
    """Running counts over groups (one case, or all cases pooled)."""

    groups: int = 0
    with_signal: int = 0
    no_signal: dict[str, int] = field(default_factory=lambda: {"all_zero": 0, "all_full": 0, "all_equal": 0})
    replies: int = 0
    format_ok: int = 0
    valid: int = 0
    failed: int = 0
    scores: list[float] = field(default_factory=list)
    group_stds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    at_cap: int = 0
    game_groups: int = 0
    identical_games: int = 0  # game groups whose games all named the very same moves

    def add(self, group: Sequence[ScoredReply], max_new_tokens: int) -> None:
        """Count one group of scored replies; a reply of ``max_new_tokens`` tokens or more hit the cap."""
        scores = [r.score for r in group]
        kind = no_signal_kind(scores)
        self.groups += 1
        if kind is None:
            self.with_signal += 1
        else:
            self.no_signal[kind] += 1
        self.group_stds.append(statistics.pstdev(scores))
        if all(r.moves is not None for r in group):
            self.game_groups += 1
            self.identical_games += int(len({r.moves for r in group}) == 1)
        for reply in group:
            self.replies += 1
            self.format_ok += int(reply.format_ok)
            self.valid += int(reply.valid)
            self.failed += int(reply.failed)
            self.scores.append(reply.score)
            if reply.tokens is not None:
                self.tokens.append(reply.tokens)
                self.at_cap += int(reply.tokens >= max_new_tokens)

    def summary(self, confidence: float) -> dict[str, Any]:
        """JSON-ready rates (Wilson intervals at ``confidence``) and means."""
        return {
            "groups": self.groups,
            "replies": self.replies,
            "groups_with_signal": proportion(self.with_signal, self.groups, confidence),
            "groups_without_signal": dict(self.no_signal),
            "format": proportion(self.format_ok, self.replies, confidence),
            "valid": proportion(self.valid, self.replies, confidence),
            "mean_score": mean_or_none(self.scores),
            "mean_group_std": mean_or_none(self.group_stds),
            "mean_response_tokens": mean_or_none([float(t) for t in self.tokens]),
            "hit_token_cap": proportion(self.at_cap, len(self.tokens), confidence) if self.tokens else None,
            "reward_failures": self.failed,
            "identical_games": (proportion(self.identical_games, self.game_groups, confidence)
                                if self.game_groups else None),
        }


def no_signal_warning(overall: dict[str, Any], threshold: float, max_new_tokens: int) -> str | None:
    """One warning naming the cures when the share of groups with signal is below ``threshold``; else None."""
    share = overall["groups_with_signal"]
    if share["rate"] is None or share["rate"] >= threshold:
        return None
    none = overall["groups_without_signal"]
    cap = overall["hit_token_cap"]
    facts = (f"{share['k']} of {share['n']} GRPO groups ({100 * share['rate']:.1f} %, 95 % CI "
             f"{100 * share['ci_low']:.1f}-{100 * share['ci_high']:.1f} %) have rewards that are not all equal, below "
             f"--threshold {threshold:g}: in the others every advantage is 0 and the run learns nothing from them. "
             f"Format {_pct(overall['format'])}, valid {_pct(overall['valid'])}, mean score "
             f"{overall['mean_score']:.3f}")
    if cap is not None:
        facts += f", {_pct(cap)} of replies hit the {max_new_tokens}-token cap"
    cures = []
    if none["all_full"] > none["all_zero"] + none["all_equal"]:
        cures.append("most groups score full marks on every reply: harder tasks (more of them are already solved)")
    else:
        cures += ["a cold start first: the recipe's SFT stages (train/recipes/recipe.sh export sft hf; "
                  "COLD_START=rules teaches the answer format and the rules only, COLD_START=reference the engine's "
                  "moves and puzzle solutions)",
                  "a different prompt or system prompt (SYSTEM_PROMPT / data.env.system_prompt; the example "
                  "replies show what the model writes)",
                  "easier tasks"]
    same = overall.get("identical_games")
    if same and same["rate"] is not None and same["rate"] >= 0.5:
        temperature = (f"a higher rollout temperature ({_pct(same)} of the groups played the very same game n "
                       "times: actor_rollout_ref.rollout.temperature=T in the run, --temperature here); it cannot "
                       "open a policy that is sure of its moves (a fitted cold start's alternatives lay 15+ nats below)")
        teacher = ("a cold start taught by a teacher that varies its moves (board games: SFT_REFERENCE_MARGIN, "
                   "openspiel.reference_margin; docs/learning.md, \"A teacher that varies its moves\")")
        cures[:0] = [temperature, teacher]
    if cap is not None and cap["rate"] is not None and cap["rate"] >= CAP_SHARE_NOTE:
        cures.append(f"a larger response budget (MAX_RESPONSE_LENGTH / --max-new-tokens, now {max_new_tokens})")
    return f"WARNING: GRPO will see (almost) no signal. {facts}. Cures: " + "; ".join(cures) + "."


def _pct(p: dict[str, Any]) -> str:
    return "-" if p is None or p["rate"] is None else f"{100 * p['rate']:.1f} %"


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _row(name: str, s: dict[str, Any]) -> str:
    tokens = "-" if s["mean_response_tokens"] is None else f"{s['mean_response_tokens']:.1f}"
    share = s["groups_with_signal"]
    return (f"| {name} | {s['groups']} | {_pct(share)} ({100 * share['ci_low']:.0f}-{100 * share['ci_high']:.0f}) "
            f"| {_pct(s['format'])} | {_pct(s['valid'])} | {s['mean_score']:.3f} | {tokens} "
            f"| {_pct(s['hit_token_cap'])} |")


def _games_line(st: dict[str, Any]) -> list[str]:
    """What a group is for full-game rows (none for single moves and puzzles)."""
    if not st.get("game_rows"):
        return []
    return [f"{st['game_rows']} of the {st['prompts']} prompts are whole games: a group is {st['n']} games of the "
            f"same deal against the opponent its seed draws, scored by the training reward; a game's response (the "
            f"trained seat's replies and later messages) gets up to {st['max_new_tokens']} tokens, each reply the "
            "game's max_tokens_per_turn.", ""]


def _overlap_lines(overlap: dict[str, Any] | None) -> list[str]:
    """The training prompts that are cold-start positions, per case (cold_start_overlap.py), and its note."""
    if not overlap:
        return []
    lines = ["## Training prompts the cold start was trained on", "",
             f"Cold start: {overlap['rows']} SFT rows ({overlap['data']}).", "",
             "| case | training tasks | on cold-start positions | distinct positions | of them cold-start ones |",
             "|---|---|---|---|---|"]
    for case, c in overlap["cases"].items():
        share = "-" if c["share"] is None else f"{100 * c['share']:.1f} %"
        lines.append(f"| {case} | {c['tasks']} | {share} | {c['positions']} | {c['cold_start_positions']} |")
    return lines + (["", overlap["note"]] if overlap.get("note") else []) + [""]


def markdown(report: dict[str, Any], with_warning: bool = True) -> str:
    """The report as markdown: settings, the table per case and overall, the verdict (with the warning unless
    ``with_warning`` is False, for a console that prints it last), example replies."""
    st = report["settings"]
    model = st["model"] + (f" + adapter {st['adapter']}" if st.get("adapter") else "")
    lines = ["# Signal check (`verl-ext signal`)", "",
             f"{model}, backend {st['backend']}: {st['prompts']} train prompts x {st['n']} replies, temperature "
             f"{st['temperature']:g}, top_p {st['top_p']:g}, up to {st['max_new_tokens']} new tokens, seed "
             f"{st['seed']} ({report['elapsed_s']:.1f} s with the model load).", "",
             *_games_line(st),
             "| case | groups | groups with signal (95 % CI) | format | valid | mean score | mean tokens | at cap |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [_row(case, summary) for case, summary in report["cases"].items()]
    lines += [_row("**overall**", report["overall"]), ""]
    none = report["overall"]["groups_without_signal"]
    lines.append(f"Groups without signal: {none['all_zero']} all scored 0, {none['all_full']} all scored 1, "
                 f"{none['all_equal']} all scored some other equal value.")
    same = report["overall"].get("identical_games")
    if same:
        lines.append(f"Groups whose {st['n']} games were the very same game (every move alike): {same['k']} of "
                     f"{same['n']} ({_pct(same)}).")
    if report["overall"]["reward_failures"]:
        lines.append(f"Reward failures (scored 0): {report['overall']['reward_failures']}.")
    if report["warning"]:
        verdict = report["warning"] if with_warning else "Verdict: no signal (the warning follows the examples)."
    else:
        verdict = f"Verdict: signal (share of groups with signal >= --threshold {st['threshold']:g})."
    lines += ["", verdict, ""]
    lines += _overlap_lines(report.get("cold_start_overlap"))
    lines.append("## Example replies")
    for example in report["examples"]:
        text = example["reply"]
        fence = _fence(text)
        lines += ["", f"{example['case']}: score {example['score']:.3f}, format {example['format_ok']}, valid "
                      f"{example['valid']}, {example['tokens'] if example['tokens'] is not None else '?'} tokens",
                  fence, text, fence]
    return "\n".join(lines) + "\n"
