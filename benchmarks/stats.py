"""Statistics over seeds as ``rliable`` (Agarwal et al., 2021) defines them for one task: the
median, the interquartile mean (IQM) and a 95% percentile-bootstrap interval of the IQM.

Hand-rolled with numpy rather than imported from ``rliable``: rliable 1.2.0 installs cleanly, but
it pulls ``arch``, ``statsmodels``, ``pandas``, ``seaborn``, ``formulaic`` and ``patsy`` into
the bench environment for what, on one task, is two lines. Its IQM is
``scipy.stats.trim_mean(scores, proportiontocut=0.25)`` (``rliable.metrics.aggregate_iqm``),
which drops ``floor(n / 4)`` scores at each end and averages the rest (no fractional weights:
with 3 seeds it is their mean); its interval is a percentile bootstrap of the runs (stratified by
task, which for one task is resampling the seeds with replacement). Both are reproduced here,
the bootstrap with a fixed seed so that a table regenerates to the same text; the tests check
the IQM against scipy's ``trim_mean``.
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
TRIM = 0.25  # the interquartile mean: a quarter off each end
# Fewer runs than this get no interval: with 3 the "IQM" is their mean and the percentile
# bootstrap of it is always [min, max]. A table then shows the runs themselves.
MIN_RUNS_FOR_INTERVAL = 5


def iqm(values, axis: int = -1) -> np.ndarray | float:
    """The interquartile mean along ``axis``: ``floor(n * 0.25)`` values dropped at each end of
    the sorted values, the rest averaged (``scipy.stats.trim_mean(values, 0.25)``)."""
    x = np.sort(np.asarray(values, dtype=float), axis=axis)
    n = x.shape[axis]
    cut = int(TRIM * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_interval(values, statistic=iqm, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                       level: float = 0.95) -> tuple[float, float] | None:
    """The ``level`` percentile-bootstrap interval of ``statistic`` over ``values`` (``reps``
    resamples with replacement, drawn from a generator seeded with ``seed``); None for fewer than
    two values, where resampling says nothing."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    rng = np.random.default_rng(seed)
    resampled = statistic(x[rng.integers(0, len(x), size=(reps, len(x)))], axis=-1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(resampled, [tail, 100 - tail])
    return float(lo), float(hi)


def summarize(values) -> dict:
    """{n, values, median, iqm, ci} of the values that exist (None and NaN left out), in their
    order; ``ci`` is the 95% bootstrap interval of the IQM, None below
    :data:`MIN_RUNS_FOR_INTERVAL` values; the figures None without any value."""
    x = [float(v) for v in values if v is not None and not np.isnan(v)]
    if not x:
        return {"n": 0, "values": [], "median": None, "iqm": None, "ci": None}
    ci = bootstrap_interval(x) if len(x) >= MIN_RUNS_FOR_INTERVAL else None
    return {"n": len(x), "values": x, "median": float(np.median(x)), "iqm": float(iqm(x)), "ci": ci}


def stratified_interval(tasks: list, statistic=iqm, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                        level: float = 0.95) -> tuple[float, float] | None:
    """rliable's stratified bootstrap over several tasks: each resample draws every task's runs
    with replacement from that task's own, pools them and takes ``statistic``; the ``level``
    percentile interval of that. None where a task has fewer than two runs."""
    arrays = [np.asarray(t, dtype=float) for t in tasks]
    if not arrays or any(len(a) < 2 for a in arrays):
        return None
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([a[rng.integers(0, len(a), size=(reps, len(a)))] for a in arrays], axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(statistic(pooled, axis=-1), [tail, 100 - tail])
    return float(lo), float(hi)


def summarize_tasks(tasks: list) -> dict:
    """:func:`summarize` of runs pooled over tasks (lists of scores, None and NaN left out), its
    interval from :func:`stratified_interval`, given only where the pool has
    :data:`MIN_RUNS_FOR_INTERVAL` runs and every task two."""
    kept = [[float(v) for v in t if v is not None and not np.isnan(v)] for t in tasks]
    kept = [t for t in kept if t]
    pooled = summarize([v for t in kept for v in t])
    pooled["ci"] = stratified_interval(kept) if pooled["n"] >= MIN_RUNS_FOR_INTERVAL else None
    return pooled


def fmt_summary(s: dict, spec: str = ",.0f") -> tuple[str, str]:
    """A :func:`summarize` as two cells: the median, and ``IQM [lo, hi]`` — or, below
    :data:`MIN_RUNS_FOR_INTERVAL` values, the values themselves (``—`` for none)."""
    if s["n"] == 0:
        return "—", "—"
    median = format(s["median"], spec)
    if s["ci"] is None:
        return f"{median} (n={s['n']})", "runs: " + " / ".join(format(v, spec) for v in s["values"])
    lo, hi = s["ci"]
    return median, f"{format(s['iqm'], spec)} [{format(lo, spec)}, {format(hi, spec)}]"
