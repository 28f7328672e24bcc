"""Row plans: pools, weights, held-out split, subsets."""

from collections import Counter

from verl_ext.mixture import VAL_INDEX_OFFSET, EnvMixture, subsample


def _section(**extra):
    base = {"openspiel": {"cases": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 10},
            "logic": {"cases": ["mini_sudoku"], "num_tasks_per_case": 10}}
    return {**base, **extra}


def test_default_plan_is_every_task_once():
    refs = EnvMixture(_section()).plan("train")
    assert Counter(r.case for r in refs) == {"tic_tac_toe": 10, "connect_four": 10, "mini_sudoku": 10}
    assert len({(r.case, r.index) for r in refs}) == 30
    assert all(r.seed == r.index for r in refs)  # seed = base seed (0) + index


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
