"""The work the benchmark cells do, as importable functions.

Cells call these (``a = bc.make_full(n, v)``) so every system -- ipy_resume,
the plain cell, joblib.Memory (which needs a function), ipycache, dill and
Kishu -- runs exactly the same computation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CATEGORIES = [f"level_{i:02d}" for i in range(20)]


def make_full(n: int, v: float) -> np.ndarray:
    """A float64 array of *n* copies of *v* (the "cell producing a 1 GB array")."""
    return np.full(n, v)


def summarize(x: np.ndarray) -> np.ndarray:
    """Block means over 1024 elements: 1/1024 of the input's size."""
    return x.reshape(-1, 1024).mean(axis=1)


def tiny(x: np.ndarray) -> float:
    """A tiny result from a large input."""
    return float(x[:4096].sum())


def small(base: list[float], i: int) -> list[float]:
    """The body of a small cell: a list of 100 floats from another list."""
    return [t * 0.5 + i for t in base]


def make_frame(rows: int, seed: int) -> Any:
    """A mixed-dtype DataFrame: int64, float64, float32, bool, datetime, category, string."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 1_000_000, rows)
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype=np.int64),
            "value": rng.standard_normal(rows),
            "score": rng.random(rows, dtype=np.float32),
            "flag": ints % 3 == 0,
            "when": np.datetime64("2024-01-01", "s") + ints.astype("timedelta64[s]"),
            "group": pd.Categorical.from_codes(ints % len(CATEGORIES), CATEGORIES),
            "label": _labels()[ints % len(_labels())],
        }
    )


_LABELS: list[np.ndarray] = []


def _labels() -> np.ndarray:
    """50,000 distinct short strings as an object array (a string column is taken from it)."""
    if not _LABELS:
        _LABELS.append(np.array([f"user_{k:05d}" for k in range(50_000)], dtype=object))
    return _LABELS[0]


def evolve(state: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """One step of a slowly changing state: two of its arrays change, the rest are kept."""
    new = dict(state)
    keys = sorted(state)
    for k in (keys[(2 * step) % len(keys)], keys[(2 * step + 1) % len(keys)]):
        new[k] = state[k] * 0.999 + 0.001 * step
    return new


def make_state(arrays: int, elems: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {f"layer_{i:02d}": rng.standard_normal(elems) for i in range(arrays)}


# ---- the 10-cell notebook of workload 6 ------------------------------------------------------


def nb_raw(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n)


def nb_smooth(raw: np.ndarray) -> np.ndarray:
    out = np.cumsum(raw)
    out /= np.arange(1, raw.size + 1)
    return out


def nb_sorted(raw: np.ndarray) -> np.ndarray:
    return np.sort(raw[: raw.size // 4])


def nb_hist(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.histogram(raw, bins=1000, range=(-5.0, 5.0))


def nb_resid(raw: np.ndarray, smooth: np.ndarray) -> np.ndarray:
    half = raw.size // 2
    return raw[:half] - smooth[:half]


def nb_fit(smooth: np.ndarray) -> np.ndarray:
    step = max(1, smooth.size // 200_000)
    ys = smooth[::step]
    return np.polyfit(np.linspace(0.0, 1.0, ys.size), ys, 3)


def nb_table(df: Any) -> Any:
    return df.groupby("group", observed=True).agg(
        mean=("value", "mean"), n=("id", "size"), flags=("flag", "sum")
    )


def nb_report(hist: np.ndarray, coef: np.ndarray, table: Any) -> str:
    text = (
        f"histogram peak {int(hist.max())}; fit {np.round(coef, 4).tolist()}; "
        f"{len(table)} groups, largest {int(table['n'].max())}"
    )
    print(text)
    return text
