"""Row plans: pools, weights, held-out split, subsets."""

from collections import Counter

import pytest

from verl_ext.envs.config import ConfigError
from verl_ext.held_out import DEFAULT_HELD_OUT_SHARE, content_key, is_held_out, training_part
from verl_ext.mixture import VAL_INDEX_OFFSET, EnvMixture, subsample


def _section(**extra):
    base = {"openspiel": {"cases": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 10},
            "logic": {"cases": ["mini_sudoku"], "num_tasks_per_case": 10}}
    return {**base, **extra}


def test_default_plan_is_every_task_once():
    refs = EnvMixture(_section()).plan("train")
    assert Counter(r.case for r in refs) == {"tic_tac_toe": 10, "connect_four": 10, "mini_sudoku": 10}
    assert len({(r.case, r.index) for r in refs}) == 30
    # seeds run from the base seed (0) upwards, skipping those whose content is held out
    for case in ("tic_tac_toe", "connect_four", "mini_sudoku"):
        seeds = [r.seed for r in refs if r.case == case]
        assert seeds == sorted(seeds) and len(set(seeds)) == 10 and seeds[0] >= 0


def test_weights_split_rows_between_envs_then_cases():
    refs = EnvMixture(_section(weights={"openspiel": 1, "logic": 3}, size=400)).plan("train")
    counts = Counter(r.env for r in refs)
    assert counts == {"openspiel": 100, "logic": 300}
    # a pool of 10 tasks serving 300 rows repeats its tasks, it never invents new ones
    assert {r.index for r in refs if r.env == "logic"} == set(range(10))


def test_validation_is_held_out():
    mixture = EnvMixture(_section(val_tasks_per_case=4))
    train = {(r.case, r.seed) for r in mixture.plan("train")}
    val = mixture.plan("val")
    assert len(val) == 12 and all(r.index >= VAL_INDEX_OFFSET for r in val)
    assert not train & {(r.case, r.seed) for r in val}


def _contents(mixture, split):
    return [(ref.case, content_key(mixture.build(ref))) for ref in mixture.plan(split)]


def test_validation_never_shares_a_content_with_training():
    # tic_tac_toe positions and small sums recur under other seeds: the split is by content, not by seed
    section = {"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 1500},
               "logic": {"cases": {"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 2}},
                         "num_tasks_per_case": 1500},
               "val_tasks_per_case": 60}
    mixture = EnvMixture(section)
    train, val = set(_contents(mixture, "train")), _contents(mixture, "val")
    assert len(val) == 120 and len(set(val)) == 120  # distinct held-out questions
    assert not train & set(val)
    assert all(is_held_out(case, key, DEFAULT_HELD_OUT_SHARE) for case, key in val)
    assert not any(is_held_out(case, key, DEFAULT_HELD_OUT_SHARE) for case, key in train)


def test_held_out_split_does_not_depend_on_pool_sizes():
    small = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 10}, "val_tasks_per_case": 20})
    large = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 3000},
                        "val_tasks_per_case": 20})
    assert small.plan("val") == large.plan("val")
    assert large.plan("train")[:10] == small.plan("train")


def test_held_out_share_sets_the_bucket_and_is_checked():
    wide = EnvMixture(_section(val_tasks_per_case=4, held_out_share=0.5))
    assert all(is_held_out(case, key, 0.5) for case, key in _contents(wide, "val"))
    for bad in (0, -0.1, 0.9, "x"):
        with pytest.raises(ConfigError, match=r"data\.env\.held_out_share: expected a number in \(0, 0\.5\]"):
            EnvMixture(_section(held_out_share=bad))


def test_training_parts_split_the_training_contents_and_leave_validation_alone():
    # a cold start fitted to one part, GRPO on the other: no position of the one is in the other
    def mixture(**extra):
        return EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "num_tasks_per_case": 600},
                           "logic": {"cases": {"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 2}},
                                     "num_tasks_per_case": 300},
                           "val_tasks_per_case": 20, **extra})

    everything = mixture()
    parts = {part: mixture(train_part=part) for part in ("cold_start", "rl")}
    cold, rl = (set(_contents(parts[p], "train")) for p in ("cold_start", "rl"))
    assert not cold & rl and cold and rl
    val = set(_contents(everything, "val"))
    assert not (cold | rl) & val
    for part in parts.values():  # same held-out set, same pool sizes, whatever the part
        assert part.plan("val") == everything.plan("val")
        assert Counter(r.case for r in part.plan("train")) == Counter(r.case for r in everything.plan("train"))
    # the parts are halves of what `all` trains on: about half of its contents each
    all_contents = set(_contents(everything, "train"))
    assert 0.3 < len(cold & all_contents) / len(all_contents) < 0.7
    # a smaller cold-start share gives the cold start fewer contents and RL more
    small = set(_contents(mixture(train_part="cold_start", cold_start_share=0.2), "train"))
    assert len({k for k in small if k[0] == "tic_tac_toe"}) < len({k for k in cold if k[0] == "tic_tac_toe"})
    assert all(training_part(case, key, DEFAULT_HELD_OUT_SHARE, 0.5) == "cold_start" for case, key in small)
    assert not small & set(_contents(mixture(train_part="rl", cold_start_share=0.2), "train"))


def test_training_part_settings_are_checked():
    with pytest.raises(ConfigError, match=r"data\.env\.train_part: expected one of all, cold_start, rl .* 'sft'"):
        EnvMixture(_section(train_part="sft"))
    for bad in (0, 1, 1.5, "half"):
        with pytest.raises(ConfigError, match=r"data\.env\.cold_start_share: expected a number in \(0, 1\)"):
            EnvMixture(_section(train_part="rl", cold_start_share=bad))


def test_a_small_case_validates_on_the_held_out_tasks_it_has():
    # sums of two one-digit numbers: about 200 possible questions, a tenth of them held out
    section = {"logic": {"cases": {"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}},
               "val_tasks_per_case": 2000}
    with pytest.warns(UserWarning, match=r"data\.env\.val_tasks_per_case=2000: case chain_sum has only \d+ "
                                         r"distinct held-out tasks"):
        val = EnvMixture(section).plan("val")
    assert 0 < len(val) < 100


def test_a_case_without_held_out_tasks_names_the_setting():
    # kuhn_poker has 12 information states; a tiny share holds none of them out
    section = {"openspiel": {"cases": ["kuhn_poker"]}, "val_tasks_per_case": 4, "held_out_share": 0.001}
    with pytest.raises(ConfigError, match=r"case kuhn_poker has no held-out task .* raise data\.env\.held_out_share"):
        EnvMixture(section).plan("val")


def test_full_games_are_split_by_seed():
    mixture = EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "task_mode": "game", "num_tasks_per_case": 6},
                          "val_tasks_per_case": 3})
    assert [r.seed for r in mixture.plan("train")] == list(range(6))
    assert [r.index for r in mixture.plan("val")] == [VAL_INDEX_OFFSET + i for i in range(3)]


def test_seed_shifts_every_task():
    plain = EnvMixture(_section()).build(EnvMixture(_section()).plan("train")[0])
    section = _section()
    section["openspiel"]["seed"] = 1234
    shifted_mixture = EnvMixture(section)
    shifted = shifted_mixture.build(shifted_mixture.plan("train")[0])
    assert shifted.seed == 1234 and shifted.state != plain.state


def test_subsample_is_seeded_and_keeps_order():
    refs = EnvMixture(_section()).plan("train")
    a, b = subsample(refs, 7, seed=3), subsample(refs, 7, seed=3)
    assert a == b and len(a) == 7
    assert [refs.index(r) for r in a] == sorted(refs.index(r) for r in a)
    assert subsample(refs, -1, 0) == refs


def test_tactical_training_positions_have_a_win_or_a_block_and_validation_is_unchanged():
    from verl_ext.envs.tactics import one_ply

    def mixture(**extra):
        return EnvMixture({"openspiel": {"cases": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 300,
                                         "task_mode": "mixed", "game_share": 0.2},
                           "logic": {"cases": {"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 2}},
                                     "num_tasks_per_case": 50},
                           "val_tasks_per_case": 20, **extra})

    everything, tactical = mixture(), mixture(train_positions="tactical", train_part="rl")
    kinds = Counter()
    for ref in tactical.plan("train"):
        task = tactical.build(ref)
        if ref.env == "logic" or task.info.get("mode") == "game":
            kinds[ref.env, task.info.get("mode")] += 1  # puzzles and whole-game rows are kept as they are
            continue
        tactics = one_ply(task.case, task.state)
        assert tactics.win_available or tactics.must_block, task.messages
        kinds["position"] += 1
    unfiltered = Counter((r.env, everything.build(r).info.get("mode")) for r in everything.plan("train"))
    assert kinds["logic", None] == unfiltered["logic", None] and kinds["openspiel", "game"] > 20
    assert kinds["position"] + kinds["openspiel", "game"] == unfiltered["openspiel", None] + unfiltered["openspiel", "game"]
    assert tactical.plan("val") == everything.plan("val")  # held-out positions stay all positions
    assert Counter(r.case for r in tactical.plan("train")) == Counter(r.case for r in everything.plan("train"))
    positions = {content for content in _contents(tactical, "train") if content[1] is not None}  # games: by seed
    assert positions and not positions & set(_contents(everything, "val"))
    # in the unfiltered plan many positions have neither: the filter is what makes the difference
    plain = [everything.build(r) for r in everything.plan("train") if r.env == "openspiel"]
    flags = [one_ply(t.case, t.state) for t in plain if t.info.get("mode") != "game"]
    assert sum(not (f.win_available or f.must_block) for f in flags) > 100


def test_train_positions_settings_are_checked():
    with pytest.raises(ConfigError, match=r"data\.env\.train_positions: expected one of all, tactical .* 'tactics'"):
        EnvMixture(_section(train_positions="tactics"))
    with pytest.raises(ConfigError, match=r"data\.env\.train_positions: 'tactical' .* case 'kuhn_poker' is not one"):
        EnvMixture({"openspiel": {"cases": ["tic_tac_toe", "kuhn_poker"]}, "train_positions": "tactical"})
    with pytest.raises(ConfigError, match=r"data\.env\.train_positions: 'tactical' filters the openspiel env's "
                                          r"positions, and no openspiel env is configured"):
        EnvMixture({"logic": {"cases": ["chain_sum"]}, "train_positions": "tactical"})
    with pytest.raises(ConfigError, match=r"task_mode is 'game' \(whole games only\): nothing to filter"):
        EnvMixture({"openspiel": {"cases": ["tic_tac_toe"], "task_mode": "game"}, "train_positions": "tactical"})
