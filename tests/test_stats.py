"""regdiag.stats on literal data against known values, and by simulation for error rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from regdiag import stats
from regdiag.stats import IMPROVED, INCONCLUSIVE, REGRESSED, UNCHANGED


def test_launch_centres_are_medians_for_times_and_means_for_values():
    launches = [[1.0, 2.0, 100.0], [3.0, 4.0, 5.0, 6.0]]
    assert stats.launch_centers(launches).tolist() == [2.0, 4.5]
    assert stats.launch_centers(launches, "mean").tolist() == pytest.approx([103 / 3, 4.5])


def test_welch_matches_scipy_on_literal_data():
    old = np.log([20.1, 19.8, 20.4, 20.0])
    new = np.log([21.0, 21.9, 20.7])
    d, lo, hi, p, df = stats.welch_core(old, new)
    ref = sps.ttest_ind(new, old, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert float(p) == pytest.approx(ref.pvalue, rel=1e-9)
    assert float(lo) == pytest.approx(ci.low, rel=1e-9)
    assert float(hi) == pytest.approx(ci.high, rel=1e-9)
    assert float(d) == pytest.approx(new.mean() - old.mean())
    assert float(df) == pytest.approx(ref.df, rel=1e-9)


def test_ratio_is_geometric_mean_of_launch_medians():
    old = [[9.0, 10.0, 11.0], [19.0, 20.0, 21.0]]  # medians 10, 20 -> geometric mean sqrt(200)
    new = [[14.0, 15.0, 16.0], [29.0, 30.0, 31.0]]  # medians 15, 30 -> sqrt(450)
    e = stats.estimate_ratio(old, new)
    assert e.old_center == pytest.approx(math.sqrt(200))
    assert e.new_center == pytest.approx(math.sqrt(450))
    assert e.ratio == pytest.approx(1.5)
    # Both launches moved by exactly x1.5: no spread in the log differences, but spread within a side.
    assert e.lo < 1.5 < e.hi
    assert e.n_old == e.n_new == 2


def test_identical_launches_give_a_degenerate_but_valid_answer():
    old = [[10.0] * 5] * 3
    same = stats.estimate_ratio(old, old)
    assert (same.ratio, same.lo, same.hi, same.p) == (1.0, 1.0, 1.0, 1.0)
    assert stats.decide(same, same.p) == UNCHANGED
    slower = stats.estimate_ratio(old, [[12.0] * 5] * 3)
    assert slower.p == 0.0 and slower.lo == slower.hi == pytest.approx(1.2)
    assert stats.decide(slower, slower.p) == REGRESSED


def test_one_launch_per_side_has_no_ci_and_is_inconclusive():
    e = stats.estimate_ratio([[10.0, 10.1]], [[12.0, 12.1]])
    assert e.lo is None and e.p is None
    assert e.ratio == pytest.approx(12.05 / 10.05)
    assert stats.decide(e, e.p) == INCONCLUSIVE


def test_ratios_refuse_non_positive_values():
    with pytest.raises(ValueError, match="positive"):
        stats.estimate_ratio([[0.0, 0.0]], [[1.0]])


def test_holm_on_a_textbook_example():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5]) == [0.5]
    assert stats.holm([0.4, 0.6]) == pytest.approx([0.8, 0.8])
    out = stats.holm([float("nan"), 0.01])
    assert math.isnan(out[0]) and out[1] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("ratio", "lo", "hi", "p", "higher", "expected"),
    [
        (1.05, 1.03, 1.07, 0.001, False, REGRESSED),
        (1.05, 0.99, 1.11, 0.20, False, INCONCLUSIVE),  # big but not significant
        (1.015, 1.005, 1.025, 0.01, False, INCONCLUSIVE),  # real, below the margin, CI crosses it
        (1.01, 1.004, 1.018, 0.01, False, UNCHANGED),  # real but inside the margin
        (1.00, 0.99, 1.01, 0.9, False, UNCHANGED),
        (0.95, 0.93, 0.97, 0.001, False, IMPROVED),
        (0.95, 0.93, 0.97, 0.001, True, REGRESSED),  # tok/s down is worse
        (1.05, 1.03, 1.07, 0.001, True, IMPROVED),
        (1.05, 1.03, 1.07, 0.08, False, INCONCLUSIVE),  # Holm-adjusted p above alpha
    ],
)
def test_verdict_rule(ratio, lo, hi, p, higher, expected):
    v = stats.verdict_core(np.log(ratio), np.log(lo), np.log(hi), np.array(p), 0.02, higher)
    assert str(v) == expected


def test_launches_to_settle_grows_with_noise_and_shrinks_with_effect():
    a = stats.launches_to_settle(0.02, math.log(1.05), 0.02)
    b = stats.launches_to_settle(0.04, math.log(1.05), 0.02)
    c = stats.launches_to_settle(0.02, math.log(1.10), 0.02)
    assert a is not None and b is not None and c is not None
    assert b > a > c >= 2
    # An effect sitting on the margin can never be settled: more than the cap.
    assert stats.launches_to_settle(0.02, math.log(1.02) - 1e-9, 0.02) is None
    # A null effect needs the CI inside +-2 %: with 2 % noise that is ~20 launches.
    assert 12 <= (stats.launches_to_settle(0.02, 0.0, 0.02) or 0) <= 30


def test_minimum_detectable_shrinks_with_launches():
    assert stats.minimum_detectable(0.02, 3, 3) > stats.minimum_detectable(0.02, 8, 8) > 0.02


def test_bootstrap_is_reproducible_and_agrees_with_welch_on_many_launches():
    rng = np.random.default_rng(5)
    old = [20 * np.exp(rng.normal(0, 0.02) + rng.normal(0, 0.03, 30)) for _ in range(10)]
    new = [21 * np.exp(rng.normal(0, 0.02) + rng.normal(0, 0.03, 30)) for _ in range(10)]
    a = stats.estimate_ratio(old, new, method="bootstrap", rng=np.random.default_rng(1))
    b = stats.estimate_ratio(old, new, method="bootstrap", rng=np.random.default_rng(1))
    w = stats.estimate_ratio(old, new)
    assert a == b
    assert a.ratio == pytest.approx(w.ratio)
    # Same centre; the bootstrap interval is somewhat narrower (it ignores that the spread is estimated).
    assert a.lo < w.ratio < a.hi
    assert 0.5 < (a.hi - a.lo) / (w.hi - w.lo) < 1.1


def test_hierarchical_bootstrap_resamples_whole_launches():
    # Two launches with constant cycles: every replicate's per-launch median is one of the two values.
    launches = [np.full((5, 1), 1.0), np.full((7, 1), 2.0)]
    reps = stats.hierarchical_stats(launches, np.median, 500, np.random.default_rng(0))
    assert reps.shape == (500, 2, 1)
    assert set(np.unique(reps)) == {1.0, 2.0}
    # Both launches get drawn, in about equal numbers.
    assert 0.4 < float(np.mean(reps == 1.0)) < 0.6


def test_noise_measures_within_between_and_drift():
    rng = np.random.default_rng(0)
    flat = [10 * np.exp(s + rng.normal(0, 0.03, 300)) for s in rng.normal(0, 0.02, 40)]
    n = stats.noise(flat)
    assert n.within == pytest.approx(0.03, rel=0.15)
    assert n.between == pytest.approx(0.02, rel=0.3)
    assert abs(n.drift) < 0.01
    warming = [np.linspace(12, 10, 90) for _ in range(3)]
    first, last = 12 - 14.5 * 2 / 89, 12 - 74.5 * 2 / 89  # medians of the first and last 30 points
    assert stats.noise(warming).drift == pytest.approx(last / first - 1)


def _simulate(rng, trials, k, n, effect):
    return (
        20 * np.exp(rng.normal(0, 0.02, (trials, k, 1)) + rng.normal(0, 0.03, (trials, k, n))) * (1 + effect)
    )


def _welch_verdicts(old, new):
    d, lo, hi, p, _ = stats.welch_core(np.log(np.median(old, -1)), np.log(np.median(new, -1)))
    return stats.verdict_core(d, lo, hi, p)


def test_simulated_false_alarms_and_power_at_the_recommended_default():
    """The bench (bench/bench_stats.py) in small: A/A <= 5 % false REGRESSED, >= 95 % power at +5 %."""
    rng = np.random.default_rng(20261129)
    k, n, trials = stats.RECOMMENDED_LAUNCHES, stats.RECOMMENDED_CYCLES, 3000
    aa = _welch_verdicts(_simulate(rng, trials, k, n, 0), _simulate(rng, trials, k, n, 0))
    ab = _welch_verdicts(_simulate(rng, trials, k, n, 0), _simulate(rng, trials, k, n, 0.05))
    assert np.mean(aa == REGRESSED) <= 0.05
    assert np.mean(ab == REGRESSED) >= 0.95
    # The pooled U test over all cycles, on the same A/A data, cries wolf (why launches are the unit).
    old, new = _simulate(rng, 500, k, n, 0), _simulate(rng, 500, k, n, 0)
    p = sps.mannwhitneyu(new.reshape(500, -1), old.reshape(500, -1), axis=-1).pvalue
    assert np.mean(p < 0.05) > 0.25
