"""The figures of a learning run, drawn from the report document and its pairs (next to the pair figures).

* utility: the test metric over steps for netdp, a trusted aggregator with the same noise
  (central) and local DP (like Muffliato Fig. 1c), from the `utility` block;
* schedule_spread: the pairwise ε of the run's schedule (realized) against the other schedule
  (planned), as sorted curves and boxes (like Muffliato Fig. 1b), from `learning.schedule_comparison`;
* communicability: a random walk's pairwise losses beside the graph's communicability expm(A),
  both on a log scale (like ICML 2024 Fig. 3), from the pairs file's `communicability` and loss columns;
* budget_accuracy: personalized learning's mean test accuracy (or RMSE) against the privacy budget, private
  CD beside purely local models and non-private CD (like AISTATS 2018 Fig. 2), from
  `utility.budget_curve`.

A report without those blocks (an averaging run, or an audit without `--data`) has none of them.
Figures are built without pyplot, so this module needs no backend of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import numpy as np
from matplotlib.figure import Figure

from coordinator_tools.audit.pairs_file import pair_matrix

LEARNING_FIGURES = {"utility": "utility.png", "schedule_spread": "schedule_spread.png",
                    "communicability": "loss_vs_communicability.png", "budget_accuracy": "accuracy_vs_budget.png"}
# Curves of the utility figure: (key in the utility block, label, style).
UTILITY_SERIES = (
    ("netdp", "netdp (mean over nodes)", {"color": "tab:blue", "linewidth": 2}),
    ("central", "central: trusted aggregator, same noise", {"color": "tab:gray", "linestyle": ":"}),
    ("local", "local DP: every node alone", {"color": "tab:red", "linestyle": "--"}),
)
SIDE_STYLES = {"realized": {"color": "tab:blue"}, "planned": {"color": "tab:orange", "linestyle": "--"}}
METRIC_LABELS = {"accuracy": "test accuracy", "mse": "test mean squared error", "rmse": "per-user test RMSE"}


def metric_label(metric: str) -> str:
    """The axis label of a test metric; a plug-in task's own metric is labelled by its name."""
    return METRIC_LABELS.get(metric, f"test {metric}")


def learning_drawers(report: Mapping[str, object], pairs: Mapping[str, np.ndarray]
                     ) -> dict[str, Callable[[], Figure]]:
    """{figure name: drawer} for the learning figures this report and its `pairs` (`read_pairs`) have data for."""
    drawers: dict[str, Callable[[], Figure]] = {}
    utility = report.get("utility") or {}
    if "steps" in utility:
        drawers["utility"] = partial(_utility, report)
    if "budget_curve" in utility:
        drawers["budget_accuracy"] = partial(_budget_accuracy, report)
    if (report.get("learning") or {}).get("schedule_comparison"):
        drawers["schedule_spread"] = partial(_schedule_spread, report)
    if "communicability" in pairs and report.get("rw_sgd"):
        drawers["communicability"] = partial(_communicability, report, pairs)
    return drawers


def side_label(side: Mapping[str, object]) -> str:
    """How a schedule of the comparison is named on the page: its graphs, and realized or planned."""
    if side["schedule"] == "erdos_renyi":
        graphs = f"Erdős–Rényi drawn every step, p = {side['edge_probability']:.3g}"
    else:
        graphs = f"fixed graph {side['graph']}, mean degree {side['mean_degree']:.3g}"
    return f"{graphs} ({side['role']})"


def _utility(report: Mapping[str, object]) -> Figure:
    utility = report["utility"]
    figure = Figure(figsize=(7.5, 4.5))
    axis = figure.subplots()
    steps = np.asarray(utility["steps"])
    for key, label, style in UTILITY_SERIES:
        axis.plot(steps, np.asarray(utility[key], dtype=float), label=label, **style)
    axis.axhline(utility["initial"], color="black", linewidth=0.8, linestyle="-.", label="theta = 0 (the start)")
    axis.set_xlabel("gradient step")
    axis.set_ylabel(metric_label(utility["metric"]))
    axis.set_title(f"Utility at sigma = {report['sigma']:g} per step ({utility['test_examples']} test examples)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def _budget_accuracy(report: Mapping[str, object]) -> Figure:
    """Private CD's mean test metric at every budget, the run's own point, and the two budget-free baselines."""
    utility = report["utility"]
    curve = utility["budget_curve"]
    figure = Figure(figsize=(7.5, 4.5))
    axis = figure.subplots()
    axis.plot(curve["epsilon"], curve["private"], marker="o", color="tab:blue",
              label=f"private CD, simulated (mean of {curve['repeats']} runs)")
    if utility.get("private") is not None:
        axis.plot([curve["run_epsilon"]], [utility["private"]], marker="*",
                  markersize=14, linestyle="", color="tab:purple", label="this run")
    axis.axhline(utility["non_private"], color="tab:green", linestyle=":", label="non-private CD")
    axis.axhline(utility["local"], color="tab:red", linestyle="--", label="purely local models")
    axis.set_xscale("log")
    axis.set_xlabel(f"budget epsilon of every agent (delta = {curve['delta']:g}, {curve['updates']} updates each)")
    label = metric_label(utility["metric"])
    axis.set_ylabel(label)
    axis.set_title(f"{label[0].upper()}{label[1:]} against the privacy budget "
                   f"({utility['test_examples']} test examples)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def _schedule_spread(report: Mapping[str, object]) -> Figure:
    comparison = report["learning"]["schedule_comparison"]
    sides = [comparison["realized"], comparison["planned"]]
    levels = np.asarray(comparison["quantile_levels"])
    figure = Figure(figsize=(13, 4.8))
    curves, boxes = figure.subplots(1, 2, gridspec_kw={"width_ratios": (3, 2)})
    for side in sides:
        curves.plot(100 * levels, side["eps"]["quantiles"], label=side_label(side), **SIDE_STYLES[side["role"]])
    baselines = report["baselines"]
    for axis in (curves, boxes):
        axis.axhline(float(baselines["ldp"]["eps"]), color="tab:red", linestyle="--", label="local DP (same noise)")
        axis.axhline(float(baselines["central"]["eps"]), color="tab:gray", linestyle=":", label="central DP")
        axis.set_ylabel(f"exact epsilon at delta = {report['delta']:g}")
        axis.grid(True, axis="y", alpha=0.3)
    curves.set_xlabel("ordered pairs u -> v, sorted by loss (percent)")
    curves.legend(fontsize=8)
    boxes.bxp([_box(side, levels) for side in sides], showmeans=True)
    boxes.set_xticks([1, 2], [f"{side['schedule'].replace('_', '-')}\n({side['role']})" for side in sides])
    figure.suptitle("Spread of pairwise losses: fixed graph against a graph drawn every step (same n, steps, noise)")
    return figure


def _box(side: Mapping[str, object], levels: np.ndarray) -> dict[str, object]:
    """A box from the stored quantiles: whiskers at the extremes, box at the quartiles, no outliers."""
    eps = side["eps"]
    q1, median, q3 = np.interp((0.25, 0.5, 0.75), levels, eps["quantiles"])
    return {"whislo": eps["min"], "q1": q1, "med": median, "q3": q3, "whishi": eps["max"], "mean": eps["mean"],
            "fliers": []}


def _communicability(report: Mapping[str, object], pairs: Mapping[str, np.ndarray]) -> Figure:
    """Thm 3's pairwise loss [u, v] (where its order is valid; else ex ante over simulated walks, the upper end of
    its interval) beside expm(A)."""
    n = int(report["run"]["n"])
    communicability = pair_matrix(pairs, "communicability", n)
    valid = report["rw_sgd"]["theorem3"]["order_valid"]
    loss = pair_matrix(pairs, "paper_rdp" if valid else "ex_ante_rdp_upper", n)
    label = "paper" if valid else "ex ante (upper end)"
    figure = Figure(figsize=(12, 5))
    panels = figure.subplots(1, 2)
    shown = ((loss, f"{label} loss u -> v (Renyi, alpha = {report['alpha']:g})"),
             (communicability, "communicability expm(A)[u, v]"))
    for axis, (matrix, title) in zip(panels, shown):
        positive = np.where(matrix > 0, matrix, np.nan)
        image = axis.imshow(np.log10(positive), cmap="viridis")
        figure.colorbar(image, ax=axis, shrink=0.8, label="log10")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("v (observer)" if axis is panels[0] else "v")
        axis.set_ylabel("u (source)" if axis is panels[0] else "u")
    figure.suptitle("Where a random walk leaks: pairwise loss against communicability (ICML 2024 Fig. 3)")
    return figure
