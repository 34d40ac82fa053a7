"""The report's figures, drawn from the report document and its pairs file (so a saved report redraws them).

* loss vs hop distance: mean with min-max bars per distance, paper vs exact (vs empirical)
  against the LDP and central baselines, in RDP and in (eps, delta) (like Muffliato Fig. 1a);
* the pair heatmap of the exact loss, source u by observer v;
* each observer's mean loss (1/n) sum_u against the LDP and central baselines;
* a learning run's utility and schedule comparison, when the report has them (`learning_figures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from coordinator_tools.audit.learning_figures import LEARNING_FIGURES, learning_drawers  # noqa: E402
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs  # noqa: E402

FIGURES = {
    "loss_vs_hops": "loss_vs_hops.png",
    "pair_heatmap": "pair_heatmap.png",
    "node_means": "node_means.png",
}
DPI = 120
# Series drawn per hop distance: (column, label, colour); offsets keep error bars apart.
RDP_SERIES = (("paper_rdp", "paper (closed form)", "tab:orange"), ("exact_rdp_upper", "exact", "tab:blue"))
EPS_SERIES = (
    ("paper_eps", "paper (closed form)", "tab:orange"),
    ("exact_eps_upper", "exact", "tab:blue"),
    ("empirical_eps_lower", "empirical (attack, lower bound)", "tab:green"),
)
OFFSET = 0.08
# The pairs file's columns the figures read (those a report's file has).
PAIR_FIGURE_COLUMNS = ("source", "observer", "hop_distance", "paper_rdp", "paper_eps", "exact_rdp_upper",
                       "exact_eps_upper", "empirical_eps_lower", "ex_ante_rdp", "communicability")


def write_figures(report: Mapping[str, object], out_dir: Path, report_dir: Path) -> dict[str, Path]:
    """Draw every figure the report has data for into out_dir; return {figure name: path}.

    `report_dir` is where the report was written (its pairs file is read from there).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = [name for name in PAIR_FIGURE_COLUMNS if name in report["pairs_file"]["columns"]]
    columns = read_pairs(Path(report_dir) / report["pairs_file"]["file"], wanted)
    drawers = {name: partial(draw, report, columns) for name, draw in
               (("loss_vs_hops", _loss_vs_hops), ("pair_heatmap", _pair_heatmap), ("node_means", _node_means))}
    drawers.update(learning_drawers(report, columns))
    paths = {}
    for name, draw in drawers.items():
        figure = draw()
        paths[name] = out_dir / {**FIGURES, **LEARNING_FIGURES}[name]
        figure.savefig(paths[name], dpi=DPI, bbox_inches="tight")
        plt.close(figure)
    return paths


def _float(value: object) -> float:
    return float("nan") if value is None else float(value)


def _baselines(report: Mapping[str, object], unit: str) -> dict[str, float]:
    baselines = report["baselines"]
    return {name: _float(baselines[name][unit]) for name in ("ldp", "central")}


def _loss_vs_hops(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    figure, (rdp_axis, eps_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    hops = columns["hop_distance"]
    distances = np.unique(hops[np.isfinite(hops)])
    panels = (
        (rdp_axis, RDP_SERIES, "rdp", f"Renyi DP at order alpha = {report['alpha']:g}"),
        (eps_axis, EPS_SERIES, "eps", f"epsilon at delta = {report['delta']:g}"),
    )
    for axis, series, unit, ylabel in panels:
        drawn = [item for item in series if np.isfinite(columns[item[0]]).any()]
        for index, (column, label, colour) in enumerate(drawn):
            _draw_by_distance(axis, hops, distances, columns[column], label, colour,
                              OFFSET * (index - (len(drawn) - 1) / 2))
        baselines = _baselines(report, unit)
        _baseline_line(axis, baselines["ldp"], color="tab:red", linestyle="--", label="local DP (same noise)")
        _baseline_line(axis, baselines["central"], color="tab:gray", linestyle=":", label="central DP (same noise)")
        _log_scale(axis, *(columns[column] for column, _, _ in drawn), [*baselines.values()])
        axis.set_xticks(distances)
        axis.set_xlabel("hop distance between source u and observer v")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="major", alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # without noise nothing finite is drawn
            axis.legend(fontsize=8)
    figure.suptitle(f"Privacy loss u -> v by hop distance (mean, min-max over pairs), run {report['run']['run_id']}")
    return figure


def _draw_by_distance(axis: plt.Axes, hops: np.ndarray, distances: np.ndarray, values: np.ndarray, label: str,
                      colour: str, offset: float) -> None:
    """Mean per distance with a bar from the smallest to the largest pair at that distance."""
    stats = []
    for distance in distances:
        at = values[(hops == distance) & np.isfinite(values) & (values > 0)]
        if at.size:
            stats.append((distance + offset, at.mean(), at.min(), at.max()))
    if not stats:
        return
    x, mean, low, high = (np.array(column) for column in zip(*stats))
    spread = np.maximum(0.0, [mean - low, high - mean])  # the mean can round past equal extremes
    axis.errorbar(x, mean, yerr=spread, color=colour, marker="o", capsize=3, label=label)


def _baseline_line(axis: plt.Axes, value: float, **style: object) -> None:
    """A baseline across the axis; an infinite one (no noise) has no line."""
    if np.isfinite(value):
        axis.axhline(value, **style)


def _log_scale(axis: plt.Axes, *values: object) -> None:
    """Log scale when something positive and finite is drawn (without noise every loss is 0 or inf)."""
    drawn = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    if np.any(np.isfinite(drawn) & (drawn > 0)):
        axis.set_yscale("log")


def _pair_heatmap(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    n = int(report["run"]["n"])
    matrix = pair_matrix(columns, "exact_rdp_upper", n)
    positive = matrix[np.isfinite(matrix) & (matrix > 0)]
    figure, axis = plt.subplots(figsize=(6.5, 5.5))
    norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if positive.size else None
    image = axis.imshow(np.where(matrix > 0, matrix, np.nan), norm=norm, cmap="viridis", interpolation="nearest")
    figure.colorbar(image, ax=axis, label=f"exact Renyi DP at alpha = {report['alpha']:g}")
    if n <= 24:
        axis.set_xticks(range(n))
        axis.set_yticks(range(n))
    axis.set_xlabel("observer v")
    axis.set_ylabel("source u")
    axis.set_title("Exact loss of every pair u -> v")
    return figure


def _node_means(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    means = report["summary"]["mean_rdp_per_observer"]
    observers = np.arange(len(means["exact_upper"]))
    baselines = _baselines(report, "rdp")
    figure, axis = plt.subplots(figsize=(max(6.0, min(14.0, 0.35 * observers.size)), 4.2))
    exact = np.array([_float(x) for x in means["exact_upper"]])
    axis.bar(observers, np.where(np.isfinite(exact), exact, np.nan), color="tab:blue", label="exact")
    for v in observers[np.isinf(exact)]:  # an infinite loss has no bar: say so where it would be
        axis.annotate("inf", (v, 1.0), xycoords=("data", "axes fraction"), ha="center", va="top", color="tab:red")
    paper = [_float(x) for x in means["paper"]]
    ldp = [_float(x) for x in means["ldp"]]
    axis.plot(observers, paper, "D", color="tab:orange", label="paper (closed form)")
    axis.plot(observers, ldp, "_", color="tab:red", markersize=14, mew=2, label="local DP (same noise)")
    _baseline_line(axis, baselines["central"], color="tab:gray", linestyle=":", label="central DP (same noise)")
    _log_scale(axis, exact, paper, ldp, [baselines["central"]])
    axis.set_xlabel("observer v")
    axis.set_ylabel(f"mean Renyi DP (1/n) sum_u, alpha = {report['alpha']:g}")
    axis.set_title("What each node learns on average about the others")
    axis.legend(fontsize=8)
    axis.grid(True, axis="y", alpha=0.3)
    return figure
