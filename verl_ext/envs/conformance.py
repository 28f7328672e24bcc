"""One conformance check every adapter and case passes (in the spirit of Gymnasium's ``check_env``)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import Any

from .base import EnvAdapter, Task
from .episode import EpisodeEnv
from .tactics import TACTIC_KEYS

_LOOKALIKES = str.maketrans({"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440",
                             "x": "\u0445", "B": "\u0412", "C": "\u0421", "R": "\u0420", "1": "\uff11"})


class ConformanceError(AssertionError):
    """An adapter broke the protocol; the message names the env, case and check."""


def lookalike(text: str) -> str:
    """``text`` with Cyrillic/full-width look-alikes, guaranteed to differ from ``text``."""
    swapped = text.translate(_LOOKALIKES)
    if swapped == text:
        swapped = "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)
    return swapped if swapped != text else text + "\u200b"


def hostile_responses(task: Task, rng: random.Random, alternative: str) -> list[object]:
    """Outputs a policy could try to get reward it did not earn, or that could crash a parser.

    ``alternative`` is another plausible answer (a second legal move, another puzzle's answer): hedging
    between it and the right answer must not pay.
    """
    moves = list(task.legal_moves) or [task.ground_truth or "x"]
    first = moves[0]
    hedges = [f"<answer>{first} or {alternative}</answer>", f"<answer>{alternative} or {first}</answer>",
              f"<answer>{first}/{alternative}</answer>", f"<answer>{first}\n{alternative}</answer>"]
    if task.legal_moves:  # chatter inside the tag is not a move
        hedges.append(f"<answer>{first} or maybe something else</answer>")
    noise = bytes(rng.getrandbits(8) for _ in range(4096)).decode("latin-1")
    listings = [] if len(moves) < 2 else [  # naming every move at once must not pay
        "<answer>" + " ".join(moves) + "</answer>",
        "<answer>" + ", ".join(moves) + "</answer>",
        "".join(f"<answer>{m}</answer>" for m in moves[:8]),
    ]
    return listings + hedges + [
        "", " ", "\n\n", "<answer></answer>", "<answer> </answer>", "<answer>",
        "</answer>", "</answer><answer>", f"<answer>{first}", f"{first}</answer>",
        f"<answer>{first}</answer><answer>{first}</answer>",
        f"<answer><answer>{first}</answer></answer>",
        f"<answer>{first}</answer> and also the others",
        f"<answer>{first}\x00</answer>", f"<answer>\x1b[2J{first}</answer>",
        "<answer>" + lookalike(first) + "</answer>",
        "x" * 1_000_000, f"<answer>{first}</answer>" + " " * 1_000_000, "<answer>" + "y" * 1_000_000 + "</answer>",
        "<answer>" * 10_000, noise, f"<answer>{noise}</answer>", "\ud800\udfff", "<answer>\ud83d</answer>",
        None, b"<answer>a1</answer>", 12345, ["<answer>", first, "</answer>"],
    ]


def _fail(task: Task | None, check: str, detail: str) -> ConformanceError:
    where = f"{task.env}/{task.case} task {task.task_id}" if task else "adapter"
    return ConformanceError(f"{where}: {check}: {detail}")


def check_adapter(adapter: EnvAdapter, cases: Iterable[str] | None = None, tasks_per_case: int = 3,
                  fresh: EnvAdapter | None = None) -> None:
    """Raise ``ConformanceError`` unless ``adapter`` honours the protocol on ``cases``.

    Checks determinism (also against ``fresh``, a second instance from the same config), the
    serialisation round trip, the score range, a reference answer that scores as valid, and that
    hostile outputs never raise and never earn more than the format component.
    """
    all_cases = adapter.cases()
    if not all_cases or len(set(all_cases)) != len(all_cases):
        raise _fail(None, "cases", f"must be non-empty and unique, got {all_cases!r}")
    format_weight = float(getattr(adapter.config, "format_weight", 0.0))
    rng = random.Random(0)
    for case in cases or all_cases:
        states = set()
        for index in range(tasks_per_case):
            seed = 1000 + index
            task = adapter.make_task(case, index, seed)
            states.add(task.state)
            _check_task_shape(adapter, task, case, index, seed)
            again = (fresh or adapter).make_task(case, index, seed)
            if again != task:
                raise _fail(task, "determinism", "make_task(case, index, seed) gave a different task twice")
            restored = json.loads(json.dumps({"state": task.state, "messages": list(task.messages)}))
            if restored["state"] != task.state or restored["messages"] != list(task.messages):
                raise _fail(task, "serialisation", "state/messages do not survive a JSON round trip")
            alternative = _alternative(adapter, task)
            _check_scores(adapter, task, restored["state"], format_weight, rng, alternative)
        if tasks_per_case >= 3 and len(states) < 2:
            raise _fail(None, "variety", f"{case}: {tasks_per_case} seeds all gave the same state")


def _check_task_shape(adapter: EnvAdapter, task: Task, case: str, index: int, seed: int) -> None:
    if (task.env, task.case, task.task_id, task.seed) != (adapter.name, case, index, seed):
        raise _fail(task, "identity", f"task carries {(task.env, task.case, task.task_id, task.seed)}")
    if not task.messages or not all(isinstance(m.get("content"), str) and m.get("role") for m in task.messages):
        raise _fail(task, "messages", "need at least one {role, content} chat message")
    if not isinstance(task.state, str) or not isinstance(task.ground_truth, str):
        raise _fail(task, "types", "state and ground_truth must be strings")
    if len(set(task.legal_moves)) != len(task.legal_moves):
        raise _fail(task, "legal_moves", "move strings must be unique")
    prompt = task.messages[-1]["content"]
    if "<answer>" not in prompt:
        raise _fail(task, "prompt", "must tell the model the <answer> format")
    for move in task.legal_moves:
        if move not in prompt:
            raise _fail(task, "prompt", f"legal move {move!r} is not listed in the prompt")


def _alternative(adapter: EnvAdapter, task: Task) -> str:
    """A second plausible answer: another legal move, or the answer of a neighbouring puzzle."""
    if len(task.legal_moves) > 1:
        return task.legal_moves[1]
    for offset in range(1, 20):
        other = adapter.make_task(task.case, task.task_id + offset, task.seed + offset).ground_truth
        if other and other != task.ground_truth:
            return other
    return "none of these"


def _check_scores(adapter: EnvAdapter, task: Task, state: str, format_weight: float, rng: random.Random,
                  alternative: str) -> None:
    reference = adapter.reference_answer(task)
    if reference is not None:
        result = adapter.score(task.case, state, reference)
        if not (result.format_ok and result.valid and 0.0 <= result.score <= 1.0):
            raise _fail(task, "reference answer", f"{reference!r} scored {result}")
    for move in task.legal_moves[:5]:
        result = adapter.score(task.case, state, f"Thinking...\n<answer>{move}</answer>")
        if not (result.valid and result.format_ok and format_weight <= result.score <= 1.0):
            raise _fail(task, "legal move", f"{move!r} scored {result}")
    for response in hostile_responses(task, rng, alternative):
        try:
            result = adapter.score(task.case, state, response)  # type: ignore[arg-type]
        except Exception as err:  # noqa: BLE001 - the whole point is that nothing escapes
            raise _fail(task, "hostile output", f"{str(response)[:60]!r} raised {err!r}") from err
        if not 0.0 <= result.score <= format_weight + 1e-9:
            raise _fail(task, "hostile output", f"{str(response)[:60]!r} earned {result.score}")


def check_episodes(adapter: EpisodeEnv, case: str, seeds: tuple[int, ...] = (0, 1), max_moves: int = 300) -> None:
    """Raise ``ConformanceError`` unless full games of ``case`` honour the episode protocol (``episode.py``).

    From every seat and each seed, two episodes fed the same seeded replies must show the same prompts and
    end the same way (chance resolved by the env, never a chance node to move); every prompt lists its legal
    moves and the answer format; each legal move written as an answer is legal; hostile replies never raise
    and are never legal; returns come per player, lie in the adapter's ``utility_range`` and normalise into
    [0, 1] as that range does; the engine's reference move at the first turn, if the env has one, is legal;
    ``move_tactics`` answers None or well-formed one-ply flags at every turn, and ``tactical_moves`` legal moves
    that agree with them (each takes the win, or blocks the threat, that ``move_tactics`` sees);
    ``move_keeps_value`` answers None or a bool, with some legal move keeping a valued position's value.
    Games stop after ``max_moves``.
    """
    num_players = adapter.start_episode(case, seeds[0], 0).num_players
    for seed in seeds:
        for seat in range(num_players):
            first, second = (_play_episode(adapter, case, seed, seat, max_moves) for _ in range(2))
            if first != second:
                raise _fail(None, "episode determinism", f"{case} seed {seed} seat {seat}: the same seed and "
                            "replies gave a different game")


def _check_move_tactics(episode: Any, case: str, move: str) -> None:
    """``move_tactics`` (the game record's one-ply counts) answers None or 0/1 flags, a taken win or a block only
    where there was one, for a legal move and for a forfeit (None), and never raises."""
    for played in (move, None):
        try:
            flags = episode.move_tactics(played)
        except Exception as err:  # noqa: BLE001 - nothing may escape
            raise _fail(None, "episode tactics", f"{case}: move_tactics({played!r}) raised {err!r}")
        if flags is None:
            continue
        if set(flags) != set(TACTIC_KEYS) or any(v not in (0.0, 1.0) for v in flags.values()) \
                or flags["win_taken"] > flags["win_chance"] or flags["blocked"] > flags["block_chance"] \
                or (played is None and (flags["win_taken"] or flags["blocked"])):
            raise _fail(None, "episode tactics", f"{case}: move_tactics({played!r}) gave {flags!r}")


def _check_move_keeps_value(episode: Any, case: str, moves: tuple[str, ...]) -> None:
    """``move_keeps_value`` (the game record's value counts) answers None or a bool, never raises, says a turn
    without a move keeps nothing, and where it values the position some legal move keeps its value."""
    try:
        kept = {None: episode.move_keeps_value(None), moves[0]: episode.move_keeps_value(moves[0])}
        if kept[moves[0]] is not None:  # a valued game (small): every move; a large one is not asked move by move
            kept.update((move, episode.move_keeps_value(move)) for move in moves[1:])
    except Exception as err:  # noqa: BLE001 - nothing may escape
        raise _fail(None, "episode value", f"{case}: move_keeps_value raised {err!r}")
    if any(value is not None and not isinstance(value, bool) for value in kept.values()):
        raise _fail(None, "episode value", f"{case}: move_keeps_value gave {kept!r}, not None or a bool")
    if kept[None] or (kept[moves[0]] is not None and not any(kept[m] for m in moves)):
        raise _fail(None, "episode value", f"{case}: move_keeps_value gave {kept!r}: a turn without a move keeps "
                    "nothing, and some legal move keeps the value")


def _check_tactical_moves(episode: Any, case: str, moves: tuple[str, ...]) -> None:
    """``tactical_moves`` (what ``scripted:tactician`` picks from) names distinct legal moves, none or some, each of
    them taking the win on the board or blocking the threat where ``move_tactics`` sees one, and never raises."""
    try:
        tactical = episode.tactical_moves()
    except Exception as err:  # noqa: BLE001 - nothing may escape
        raise _fail(None, "episode tactics", f"{case}: tactical_moves() raised {err!r}")
    if not isinstance(tactical, tuple) or len(set(tactical)) != len(tactical) or not set(tactical) <= set(moves):
        raise _fail(None, "episode tactics", f"{case}: tactical_moves() gave {tactical!r}, not legal moves {moves!r}")
    checked = tactical
    # Every legal move offered is right when the position has no tactic, which any one move's flags tell; asking
    # each move of a large game (chess) about its tactics made the whole-game conformance tests ~50 % slower.
    if tactical and len(tactical) == len(moves):
        first = episode.move_tactics(tactical[0])
        checked = tactical if first and (first["win_chance"] or first["block_chance"]) else ()
    for move in checked:
        flags = episode.move_tactics(move)
        if flags and (flags["win_chance"] and not flags["win_taken"] or flags["block_chance"] and not flags["blocked"]):
            raise _fail(None, "episode tactics", f"{case}: tactical move {move!r} misses the tactic: {flags!r}")


def _play_episode(adapter: EpisodeEnv, case: str, seed: int, seat: int, max_moves: int) -> tuple:
    episode = adapter.start_episode(case, seed, seat)
    if (episode.case, episode.seed, episode.seat) != (case, seed, seat):
        raise _fail(None, "episode identity", f"{case}: episode carries {(episode.case, episode.seed, episode.seat)}")
    rng, prompts = random.Random(seed), []
    while not episode.is_over() and episode.moves_played() < max_moves:
        player, moves = episode.current_player(), episode.legal_moves()
        if not 0 <= player < episode.num_players or not moves or len(set(moves)) != len(moves):
            raise _fail(None, "episode turn", f"{case}: player {player} to move with legal moves {moves!r}")
        prompt = episode.prompt()
        if "<answer>" not in prompt or any(move not in prompt for move in moves):
            raise _fail(None, "episode prompt", f"{case}: the prompt must list every legal move and the format")
        if episode.moves_played() == 0 and seat == 0:
            reference = episode.reference_move()
            if reference is not None and reference not in moves:
                raise _fail(None, "episode reference move", f"{case}: engine move {reference!r} is not legal")
        move = rng.choice(moves)
        check = episode.check(f"I pick this.\n<answer>{move}</answer>")
        if not (check.legal and check.move == move and check.format_ok):
            raise _fail(None, "episode check", f"{case}: legal move {move!r} checked as {check}")
        if episode.moves_played() in (0, 7):  # hostile replies at two points of every game
            task = Task(adapter.name, case, 0, seed, (), prompt, "", legal_moves=moves)  # type: ignore[attr-defined]
            for response in hostile_responses(task, rng, moves[-1]):
                try:
                    verdict = episode.check(response)
                except Exception as err:  # noqa: BLE001 - nothing may escape
                    raise _fail(None, "episode hostile output", f"{case}: {str(response)[:60]!r} raised {err!r}")
                if verdict.legal:
                    raise _fail(None, "episode hostile output", f"{case}: {str(response)[:60]!r} passed as legal")
        _check_move_tactics(episode, case, move)
        _check_tactical_moves(episode, case, moves)
        _check_move_keeps_value(episode, case, moves)
        prompts.append(prompt)
        episode.play(move)
    returns = episode.returns()
    if len(returns) != episode.num_players:
        raise _fail(None, "episode returns", f"{case}: {len(returns)} returns for {episode.num_players} players")
    for player in range(episode.num_players):
        if not 0.0 <= episode.normalised_return(player) <= 1.0:
            raise _fail(None, "episode returns", f"{case}: normalised return {episode.normalised_return(player)}")
    utility = adapter.utility_range(case)  # the reward refuses a game record whose returns fall outside it
    if utility.num_players != episode.num_players or not all(utility.low <= r <= utility.high for r in returns):
        raise _fail(None, "episode returns", f"{case}: returns {returns} outside utility_range {utility}")
    if any(utility.normalise(r) != episode.normalised_return(p) for p, r in enumerate(returns)):
        raise _fail(None, "episode returns", f"{case}: utility_range {utility} normalises {returns} unlike the episode")
    return tuple(prompts), tuple(returns), episode.is_over()


def check_private_view(adapter: object, case: str, seeds: tuple[int, ...] = (0, 1, 2, 3), max_moves: int = 200) -> int:
    """Raise ``ConformanceError`` unless, in the imperfect-information OpenSpiel game ``case``, the prompt of the
    player to move (``adapter.position_prompt``) depends only on what that player can see.

    For every seed and player ``v`` a game is played at random, then replayed with the same moves and, at each
    chance node, another outcome wherever ``v``'s own view after it (OpenSpiel's information-state string, else
    its observation string) stays the same: a card dealt to someone else, a card ``v`` draws blind. While ``v``'s
    view of the two games agrees, ``v``'s prompts must be equal; returns how many such pairs of different states
    were compared (0 for a case where no hidden outcome exists is an error: the check would prove nothing).
    """
    import pyspiel

    game = pyspiel.load_game(case)
    if game.get_type().information == pyspiel.GameType.Information.PERFECT_INFORMATION:
        raise _fail(None, "private view", f"{case}: a perfect-information game has nothing hidden")
    use_info = game.get_type().provides_information_state_string

    def view(state: pyspiel.State, player: int) -> str:
        return state.information_state_string(player) if use_info else state.observation_string(player)

    compared = 0
    for seed in seeds:
        rng = random.Random(seed)
        played, state = [], game.new_initial_state()
        while not state.is_terminal() and len(played) < max_moves:
            if state.is_chance_node():
                outcomes, weights = zip(*state.chance_outcomes())
                action = rng.choices(outcomes, weights=weights, k=1)[0]
            else:
                action = rng.choice(state.legal_actions())
            played.append(action)
            state.apply_action(action)
        for viewer in range(game.num_players()):
            compared += _compare_private_views(adapter, case, game, played, viewer, view, random.Random(seed))
    if compared == 0:
        raise _fail(None, "private view", f"{case}: no two states differing only in hidden outcomes were found")
    return compared


def _compare_private_views(adapter: object, case: str, game: object, played: list[int], viewer: int,
                           view: object, rng: random.Random) -> int:
    """Replay ``played`` with other hidden chance outcomes for ``viewer``; compare its prompts while its view agrees."""
    first, second = game.new_initial_state(), game.new_initial_state()  # type: ignore[attr-defined]
    compared = 0
    for action in played:
        if first.is_chance_node():
            first.apply_action(action)
            target = view(first, viewer)  # type: ignore[operator]
            available = [a for a, _ in second.chance_outcomes()]
            others = [a for a in available if a != action]
            rng.shuffle(others)  # another outcome first; the game's own (if still possible) last
            for other in others + [a for a in available if a == action]:
                trial = second.child(other)
                if view(trial, viewer) == target:  # type: ignore[operator]
                    second = trial
                    break
            else:
                return compared  # no outcome keeps the viewer's view: the games part here
            continue
        if second.is_chance_node() or action not in second.legal_actions():
            return compared
        if view(first, viewer) != view(second, viewer):  # type: ignore[operator]
            return compared
        if first.current_player() == viewer and first.history() != second.history():
            prompts = [adapter.position_prompt(case, s) for s in (first, second)]  # type: ignore[attr-defined]
            if prompts[0] != prompts[1]:
                raise _fail(None, "private view", f"{case}: player {viewer}'s prompt differs between histories "
                            f"{first.history()} and {second.history()} although its view is the same")
            compared += 1
        first.apply_action(action)
        second.apply_action(action)
    return compared
