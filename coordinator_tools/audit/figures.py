"""The report's figures, drawn from the report document and its pairs file (so a saved report redraws them).

* loss vs hop distance: mean with min-max bars per distance, paper (and its corrected form, where
  the protocol has one) vs exact (vs empirical, the real run's canaries, and the model attack) against
  the LDP and central baselines, in RDP and in (eps, delta) (like Muffliato Fig. 1a); a paper ε by the
  paper's own conversion says so in its label;
* the pair heatmap of the exact loss, source u by observer v, its colour bar labelled at every range
  (`colorbar_ticks`), the diagonal, infinite and zero losses drawn as categories of their own;
* each observer's mean loss (1/n) sum_{u != v} against the LDP and central baselines;
* each observer's loss against hop distance, one thin line per observer and their mean: on a graph
  where every node looks alike the mean bars above are all equal, this still shows the decay;
* a learning run's utility and schedule comparison, when the report has them (`learning_figures`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap, LogNorm  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from coordinator_tools.audit.learning_figures import LEARNING_FIGURES, learning_drawers  # noqa: E402
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs  # noqa: E402
from coordinator_tools.audit.report import MEAN_RULE  # noqa: E402

FIGURES = {
    "loss_vs_hops": "loss_vs_hops.png",
    "pair_heatmap": "pair_heatmap.png",
    "node_means": "node_means.png",
    "loss_by_observer": "loss_by_observer.png",
}
DPI = 120
# Series drawn per hop distance: (column, label, colour); offsets keep error bars apart.
RDP_SERIES = (("paper_rdp", "paper (closed form)", "tab:orange"),
              ("paper_corrected_rdp", "paper (corrected)", "tab:purple"), ("exact_rdp_upper", "exact", "tab:blue"))
EPS_SERIES = (
    ("paper_eps", "paper (closed form)", "tab:orange"),
    ("paper_corrected_eps", "paper (corrected)", "tab:purple"),
    ("exact_eps_upper", "exact", "tab:blue"),
    ("empirical_eps_lower", "empirical (the run's canaries, lower bound)", "tab:green"),
    ("model_attack_eps_lower", "model attack (self-check, lower bound)", "tab:olive"),
)
# Added to a paper series' ε label when the report converted it by the paper's classic rule, not as exact.
OTHER_BASIS = ", classic conversion: not exact's basis"
OFFSET = 0.08
ZERO_MARK_HEIGHT = 0.04  # where a loss of 0 is marked, as a share of the axis' height above its floor
# Cells of the heatmap that are no value on the colour scale: (label, colour), in this order of categories.
HEATMAP_CATEGORIES = (("own (u = v): not a pair", "#d9d9d9"), ("inf: the view pins u's input down", "#b00020"),
                      ("0: the view does not depend on u", "white"), ("no value", "#f3e5f5"))
# Colour-bar ticks: at most this many, at 1, 2 and 5 times powers of ten while they fit.
MAX_TICKS = 8
# Observers drawn one line each in loss_by_observer; beyond, an evenly spaced subset.
MAX_OBSERVER_LINES = 64
# The pairs file's columns the figures read (those a report's file has).
PAIR_FIGURE_COLUMNS = ("source", "observer", "hop_distance", "paper_rdp", "paper_eps", "paper_corrected_rdp",
                       "paper_corrected_eps", "exact_rdp_upper", "exact_eps_upper", "empirical_eps_lower",
                       "model_attack_eps_lower", "ex_ante_rdp_upper", "communicability")


def write_figures(report: Mapping[str, object], out_dir: Path, report_dir: Path) -> dict[str, Path]:
    """Draw every figure the report has data for into out_dir; return {figure name: path}.

    `report_dir` is where the report was written (its pairs file is read from there).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = [name for name in PAIR_FIGURE_COLUMNS if name in report["pairs_file"]["columns"]]
    columns = read_pairs(Path(report_dir) / report["pairs_file"]["file"], wanted)
    drawers = {name: partial(draw, report, columns) for name, draw in
               (("loss_vs_hops", _loss_vs_hops), ("pair_heatmap", _pair_heatmap), ("node_means", _node_means),
                ("loss_by_observer", _loss_by_observer))}
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
    classic = report["summary"].get("paper_conversion") == "paper"
    for axis, series, unit, ylabel in panels:
        drawn = [item for item in series if item[0] in columns and np.isfinite(columns[item[0]]).any()]
        for index, (column, label, colour) in enumerate(drawn):
            if classic and unit == "eps" and column.startswith("paper"):
                label = label.removesuffix(")") + OTHER_BASIS + ")"
            draw_by_distance(axis, hops, distances, columns[column], label, colour,
                              OFFSET * (index - (len(drawn) - 1) / 2))
        baselines = _baselines(report, unit)
        _baseline_line(axis, baselines["ldp"], color="tab:red", linestyle="--", label="local DP (same noise)")
        _baseline_line(axis, baselines["central"], color="tab:gray", linestyle=":", label="central DP (same noise)")
        _log_scale(axis, *(columns[column] for column, _, _ in drawn), [*baselines.values()])
        axis.set_xticks(distances)
        if distances.size:  # every distance in view, a last one drawn only as a 0 marker too
            axis.set_xlim(distances.min() - 0.5, distances.max() + 0.5)
        axis.set_xlabel("hop distance between source u and observer v")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="major", alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # without noise nothing finite is drawn
            axis.legend(fontsize=8)
    figure.suptitle(f"Privacy loss u -> v by hop distance (mean, min-max over pairs), run {report['run']['run_id']}")
    return figure


def draw_by_distance(axis: plt.Axes, hops: np.ndarray, distances: np.ndarray, values: np.ndarray, label: str,
                      colour: str, offset: float) -> None:
    """Mean per distance with a bar from the smallest to the largest pair at that distance; a distance where every
    pair's loss is 0 (the view does not depend on the source), which a log axis cannot place, is a hollow marker
    on the axis' floor, so that it reads as 0 and not as missing."""
    stats, zeros = [], []
    for distance in distances:
        at = values[(hops == distance) & np.isfinite(values)]
        if at.size and at.max() > 0:
            stats.append((distance + offset, at.mean(), at.min(), at.max()))
        elif at.size:
            zeros.append(distance + offset)
    if stats:
        x, mean, low, high = (np.array(column) for column in zip(*stats))
        spread = np.maximum(0.0, [mean - low, high - mean])  # the mean can round past equal extremes
        axis.errorbar(x, mean, yerr=spread, color=colour, marker="o", capsize=3, label=label)
    if zeros:  # x in data, y in axes coordinates: on the floor whatever the scale
        axis.scatter(zeros, np.full(len(zeros), ZERO_MARK_HEIGHT), transform=axis.get_xaxis_transform(), marker="v",
                     s=60, facecolors="none", edgecolors=colour, label=f"{label}: 0 at this distance")


def _baseline_line(axis: plt.Axes, value: float, **style: object) -> None:
    """A baseline across the axis; an infinite one (no noise) has no line."""
    if np.isfinite(value):
        axis.axhline(value, **style)


def _log_scale(axis: plt.Axes, *values: object) -> None:
    """Log scale when something positive and finite is drawn (without noise every loss is 0 or inf)."""
    drawn = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    if np.any(np.isfinite(drawn) & (drawn > 0)):
        axis.set_yscale("log")


def colorbar_ticks(low: float, high: float) -> list[float]:
    """Ticks for a log colour bar from low to high (both > 0): 1, 2, 5 x 10^k where they fit (only the decades on
    a wide range, 1 and 3 x 10^k in between), else a few evenly spaced values (log scale) rounded to two digits;
    always at least two."""
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    inside = (low * (1 - 1e-9), high * (1 + 1e-9))
    for mantissas in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**k for k in decades for m in mantissas if inside[0] <= m * 10.0**k <= inside[1]]
        if 3 <= len(ticks) <= MAX_TICKS:
            return ticks
        if len(ticks) > MAX_TICKS and mantissas == (1,):
            step = int(np.ceil(len(ticks) / MAX_TICKS))
            return ticks[::step]
    return sorted({float(f"{x:.2g}") for x in np.geomspace(low, high, 4)})


def tick_label(value: float) -> str:
    """A colour-bar label people read at any size: 0.002, 0.5, 20, 300, and 2e-6 or 3e5 beyond."""
    if 1e-4 <= value < 1e5:
        return f"{float(f'{value:.2g}'):f}".rstrip("0").rstrip(".")
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _pair_heatmap(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    n = int(report["run"]["n"])
    matrix = pair_matrix(columns, "exact_rdp_upper", n)
    own = np.eye(n, dtype=bool)
    finite = np.isfinite(matrix) & (matrix > 0)
    categories = np.select([own, np.isposinf(matrix), matrix == 0, np.isnan(matrix)], [0, 1, 2, 3], np.nan)
    figure, axis = plt.subplots(figsize=(6.5, 6.0))
    if finite.any():
        low, high = float(matrix[finite].min()), float(matrix[finite].max())
        if low == high:  # every pair alike: a scale around the one value
            low, high = low / 1.5, high * 1.5
        image = axis.imshow(np.where(finite, matrix, np.nan), norm=LogNorm(vmin=low, vmax=high), cmap="viridis",
                            interpolation="nearest")
        bar = figure.colorbar(image, ax=axis, label=f"exact Renyi DP at alpha = {report['alpha']:g} (log scale)")
        ticks = colorbar_ticks(low, high)
        bar.set_ticks(ticks, labels=[tick_label(t) for t in ticks])
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
    palette = ListedColormap([colour for _, colour in HEATMAP_CATEGORIES])
    axis.imshow(categories, cmap=palette, vmin=-0.5, vmax=len(HEATMAP_CATEGORIES) - 0.5, interpolation="nearest")
    present = [int(c) for c in np.unique(categories[np.isfinite(categories)])]
    axis.legend(handles=[Patch(facecolor=HEATMAP_CATEGORIES[c][1], edgecolor="#999", label=HEATMAP_CATEGORIES[c][0])
                         for c in present], loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8,
                frameon=False)
    if n <= 24:
        axis.set_xticks(range(n))
        axis.set_yticks(range(n))
        for v in range(n):
            axis.text(v, v, "own", ha="center", va="center", fontsize=6, color="#555")
    axis.set_xlabel("observer v")
    axis.set_ylabel("source u")
    axis.set_title("Exact loss of every pair u -> v")
    return figure


def observer_curves(n: int, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(hop distances, curves[v, j]): observer v's mean exact ε (upper end) over the sources at distance j,
    NaN where it has no source there with a finite loss."""
    loss = pair_matrix(columns, "exact_eps_upper", n)
    hops = pair_matrix(columns, "hop_distance", n)
    distances = np.unique(hops[np.isfinite(hops)])
    usable = np.isfinite(loss)
    curves = np.full((n, distances.size), np.nan)
    for j, distance in enumerate(distances):
        at = (hops == distance) & usable
        counts = at.sum(axis=0)
        sums = np.where(at, loss, 0.0).sum(axis=0)
        curves[:, j] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return distances, curves


def _loss_by_observer(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    """Per observer, its mean exact ε over the sources at each hop distance: one thin line each, and their mean."""
    n = int(report["run"]["n"])
    distances, curves = observer_curves(n, columns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a distance no observer has a finite loss at
        mean = np.nanmean(curves, axis=0)
    ldp = _baselines(report, "eps")["ldp"]
    positive = np.append(curves[np.isfinite(curves) & (curves > 0)], ldp if np.isfinite(ldp) and ldp > 0 else [])
    logarithmic = positive.size > 0 and positive.max() > 10 * positive.min()  # a log scale only across a decade
    zero_at = distances[mean == 0]
    if logarithmic:  # a zero loss has no place on a log scale: named in the title instead
        curves, mean = np.where(curves > 0, curves, np.nan), np.where(mean > 0, mean, np.nan)
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    drawn = np.unique(np.linspace(0, n - 1, min(n, MAX_OBSERVER_LINES)).round().astype(int))
    for v in drawn:
        axis.plot(distances, curves[v], color="tab:blue", alpha=0.35, linewidth=0.8,
                  label="one observer (mean over sources at that distance)" if v == drawn[0] else None)
    axis.plot(distances, mean, color="black", linewidth=2.2, marker="o", label="mean over observers")
    _baseline_line(axis, ldp, color="tab:red", linestyle="--", label="local DP (same noise)")
    if logarithmic:
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: tick_label(value)))
    if np.isfinite(curves).any():
        axis.legend(fontsize=8)
    else:
        axis.text(0.5, 0.5, "no finite loss to draw", transform=axis.transAxes, ha="center")
    axis.set_xticks(distances)
    axis.set_xlabel("hop distance from the source u to the observer v")
    axis.set_ylabel(f"exact epsilon at delta = {report['delta']:g}")
    shown = "every observer" if drawn.size == n else f"{drawn.size} of {n} observers"
    zeros = f"; loss 0 at distance {', '.join(f'{d:g}' for d in zero_at)}" if logarithmic and zero_at.size else ""
    axis.set_title(f"What each observer learns by distance to the source ({shown}{zeros})")
    axis.grid(True, which="major", alpha=0.3)
    return figure


def _node_means(report: Mapping[str, object], columns: Mapping[str, np.ndarray]) -> plt.Figure:
    means = report["summary"]["mean_rdp_per_observer"]
    observers = np.arange(len(means["exact_upper"]))
    baselines = _baselines(report, "rdp")
    figure, axis = plt.subplots(figsize=(max(6.0, min(14.0, 0.35 * observers.size)), 4.2))
    exact = np.array([_float(x) for x in means["exact_upper"]])
    axis.bar(observers, np.where(np.isfinite(exact), exact, np.nan), color="tab:blue", label="exact")
    # The observers' span, set before any label goes on it: with no finite bar (a run without noise) the limits
    # would not cover the "inf" labels, and a tight bounding box would stretch the figure to reach them.
    axis.set_xlim(-0.5, observers.size - 0.5)
    for v in observers[np.isinf(exact)]:  # an infinite loss has no bar: say so where it would be
        axis.annotate("inf", (v, 1.0), xycoords=("data", "axes fraction"), ha="center", va="top", color="tab:red")
    paper = [_float(x) for x in means["paper"]]
    ldp = [_float(x) for x in means["ldp"]]
    axis.plot(observers, paper, "D", color="tab:orange", label="paper (closed form)")
    axis.plot(observers, ldp, "_", color="tab:red", markersize=14, mew=2, label="local DP (same noise)")
    _baseline_line(axis, baselines["central"], color="tab:gray", linestyle=":", label="central DP (same noise)")
    _log_scale(axis, exact, paper, ldp, [baselines["central"]])
    axis.set_xlabel("observer v")
    axis.set_ylabel(f"mean Renyi DP at alpha = {report['alpha']:g}\n{MEAN_RULE}")
    axis.set_title("What each node learns on average about the others")
    axis.legend(fontsize=8)
    axis.grid(True, axis="y", alpha=0.3)
    return figure
