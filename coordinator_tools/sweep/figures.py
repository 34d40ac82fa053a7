"""The sweep's figures: utility against mean and against worst-pair exact ε, from the CSV's rows.

One curve per (protocol, graph) (and per n and T when the grid varies them), its points ordered by
σ, and in black the local-DP (dashed) and central-DP (dotted) curves: the baselines' utility at the
same noise against their ε, one pair per size n (and per number of steps for learning), since they
depend on nothing else (their utility at each σ is the mean over the points that have it). One panel
per utility metric (MSE, test accuracy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import cycle
from pathlib import Path
from statistics import mean

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported

import matplotlib.pyplot as plt

MEAN_FIGURE = "utility_vs_mean_eps.png"
WORST_FIGURE = "utility_vs_worst_eps.png"
X_LABELS = {"mean_exact_eps": "mean exact eps, max_v (1/n) sum_u eps(u -> v)",
            "worst_exact_eps": "worst-pair exact eps"}
Y_LABELS = {"mse": "MSE per coordinate to the true mean", "accuracy": "test accuracy"}
CURVE_KEYS = ("protocol", "graph", "n", "T")
Row = Mapping[str, object]


def utility_figures(rows: Sequence[Row], out: Path) -> list[Path]:
    """Both figures into `out`; nothing when no point has finished."""
    if not rows:
        return []
    return [utility_vs_eps(rows, "mean_exact_eps", Path(out) / MEAN_FIGURE),
            utility_vs_eps(rows, "worst_exact_eps", Path(out) / WORST_FIGURE)]


def utility_vs_eps(rows: Sequence[Row], column: str, path: Path) -> Path:
    """Utility against the rows' `column` (a run's ε), with the baselines against their own ε."""
    metrics = sorted({str(row["utility_metric"]) for row in rows})
    figure, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 4.8), squeeze=False)
    varying = [key for key in CURVE_KEYS[2:] if len({row[key] for row in rows}) > 1]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis, metric in zip(axes[0], metrics):
        chosen = [row for row in rows if row["utility_metric"] == metric]
        for colour, (key, members) in zip(cycle(colours), _curves(chosen, CURVE_KEYS).items()):
            axis.plot([float(row[column]) for row in members], [float(row["utility"]) for row in members], "-o",
                      color=colour, label=_label(key[:2], zip(CURVE_KEYS[2:], key[2:]), varying))
        baseline_keys = ("n", "T") if metric != "mse" else ("n",)  # learning baselines depend on the steps too
        for key, members in _curves(chosen, baseline_keys).items():
            suffix = _label((), zip(baseline_keys, key), varying)
            by_sigma: dict[float, list[Row]] = {}
            for row in members:
                by_sigma.setdefault(float(row["sigma"]), []).append(row)
            utility = [mean(float(row["baseline_utility"]) for row in same) for same in by_sigma.values()]
            for eps, style, name in (("ldp_eps", "--x", "local DP"), ("central_eps", ":+", "central DP")):
                axis.plot([float(same[0][eps]) for same in by_sigma.values()], utility, style, color="black",
                          linewidth=1, label=f"{name}, same noise{', ' + suffix if suffix else ''}")
        axis.legend(fontsize=7)
        axis.set_xscale("log")
        if metric == "mse":
            axis.set_yscale("log")
        axis.set_xlabel(f"{X_LABELS[column]} at delta = {float(rows[0]['delta']):g}")
        axis.set_ylabel(Y_LABELS.get(metric, metric))
        axis.grid(True, which="major", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _curves(rows: Sequence[Row], keys: Sequence[str]) -> dict[tuple[object, ...], list[Row]]:
    """The rows grouped by their values of `keys`, each group ordered by σ."""
    curves: dict[tuple[object, ...], list[Row]] = {}
    for row in rows:
        curves.setdefault(tuple(row[key] for key in keys), []).append(row)
    return {key: sorted(members, key=lambda row: float(row["sigma"])) for key, members in curves.items()}


def _label(names: Sequence[object], values: Iterable[tuple[str, object]], varying: Sequence[str]) -> str:
    """A legend label: the curve's names, then the grid's varying values (n = 16, T = 4)."""
    return ", ".join([*map(str, names), *(f"{key} = {value}" for key, value in values if key in varying)])
