"""The MuJoCo table's statistics: the IQM and its bootstrap interval as rliable defines them."""

import numpy as np
import pytest
import scipy.stats

from benchmarks import stats


@pytest.mark.parametrize("values, expected", [
    ([7.0], 7.0), ([1.0, 3.0], 2.0), ([3.0, 1.0, 2.0], 2.0), ([1.0, 2.0, 3.0, 4.0], 2.5),
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0], 4.5),  # two off each end: the outlier counts for nothing
])
def test_iqm_is_rliables_trimmed_mean(values, expected):
    assert stats.iqm(values) == pytest.approx(expected)
    assert stats.iqm(values) == pytest.approx(scipy.stats.trim_mean(values, 0.25))


def test_iqm_matches_scipy_along_an_axis():
    x = np.random.default_rng(1).normal(size=(50, 9))
    np.testing.assert_allclose(stats.iqm(x, axis=-1), scipy.stats.trim_mean(x, 0.25, axis=1))


def test_bootstrap_interval_is_a_seeded_percentile_bootstrap():
    x = [100.0, 900.0, 2000.0]
    lo, hi = stats.bootstrap_interval(x)
    assert (lo, hi) == stats.bootstrap_interval(x)  # the same text each time the docs regenerate
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    means = np.asarray(x)[rng.integers(0, 3, size=(stats.BOOTSTRAP_REPS, 3))].mean(axis=1)  # IQM of 3: their mean
    assert (lo, hi) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))
    assert 100.0 <= lo < stats.iqm(x) < hi <= 2000.0
    assert stats.bootstrap_interval([5.0, 5.0, 5.0]) == (5.0, 5.0)
    assert stats.bootstrap_interval([5.0]) is None


def test_summaries_leave_out_missing_values_and_show_one_seed_without_an_interval():
    s = stats.summarize([3.0, None, 1.0, float("nan"), 2.0])
    assert (s["n"], s["median"], s["iqm"]) == (3, 2.0, 2.0) and s["ci"] is not None
    median, iqm = stats.fmt_summary(stats.summarize([1000.0, 2000.0, 3000.0]))
    assert median == "2,000" and iqm.startswith("2,000 [") and iqm.endswith("]")
    assert stats.fmt_summary(stats.summarize([5442.4])) == ("5,442 (n=1)", "5,442 (n=1)")
    assert stats.fmt_summary(stats.summarize([None])) == ("—", "—")
