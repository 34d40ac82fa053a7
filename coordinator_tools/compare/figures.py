"""The comparison's figures: mean ε by hop distance (as ICML 2024 Fig. 1), test accuracy over steps, and the
noise designs' utility against ε."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.axes import Axes  # noqa: E402

from coordinator_tools.compare.setup import GOSSIP, WALK  # noqa: E402

LOSS_FIGURE = "loss_vs_hops.png"
ACCURACY_FIGURE = "accuracy.png"
DESIGNS_FIGURE = "designs.png"
COLOURS = {GOSSIP: "tab:blue", WALK: "tab:orange"}
LABELS = {GOSSIP: "gossip (Muffliato-GD)", WALK: "random walk"}
# (column, line style, label suffix): the column each protocol is compared by is drawn solid.
SERIES = {GOSSIP: (("exact", "-", "exact"),),
          WALK: (("ex_ante", "-", "ex ante"), ("realized_path", ":", "realized path"))}


def loss_vs_hops(document: Mapping[str, object], out: Path) -> Path:
    """Mean ε per hop distance for both protocols on one axis, each with its local-DP loss dashed."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    draw_loss_vs_hops(document, axis)
    return _save(figure, out / LOSS_FIGURE)


def draw_loss_vs_hops(document: Mapping[str, object], axis: Axes) -> None:
    """The loss-by-hop-distance panel of one comparison on `axis` (a figure may hold several comparisons)."""
    for name, entry in document["protocols"].items():
        colour = COLOURS[name]
        for column, style, suffix in SERIES[name]:
            per_hop = entry["mean_eps_per_hop"][column]
            axis.plot([int(h) for h in per_hop], list(per_hop.values()), style, marker="o", color=colour,
                      label=f"{LABELS[name]}: {suffix} (sigma = {entry['sigma']:.3g})")
        axis.axhline(entry["ldp_eps"], color=colour, linestyle="--", linewidth=1, label=f"{LABELS[name]}: LDP")
    axis.axhline(document["target"]["mean_eps"], color="tab:gray", linestyle="-.", linewidth=1,
                 label="target mean eps")
    axis.set_yscale("log")
    axis.set_xlabel("shortest path length between source u and observer v")
    axis.set_ylabel(f"mean pairwise epsilon at delta = {document['target']['delta']:g}")
    axis.set_title(f"{document['graph']}, n = {document['n']}, {document['dataset']}: "
                   f"same mean eps = {document['target']['mean_eps']:g}")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize=7)


def accuracy(document: Mapping[str, object], out: Path) -> Path:
    """Test metric against gradient steps per node (the walk's step t counts as t/n), run and trusted curator."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    n = document["n"]
    for name, entry in document["protocols"].items():
        curve = entry["accuracy_curve"]
        scale = 1.0 if name == GOSSIP else 1.0 / n
        for key, style, label in (("run", "-", "run"), ("trusted_curator", ":", "trusted curator, same noise")):
            x, y = _known(curve["steps"], curve[key])
            axis.plot([step * scale for step in x], y, style, color=COLOURS[name], label=f"{LABELS[name]}: {label}")
    axis.set_xlabel("gradient steps per node (on average)")
    axis.set_ylabel(f"test {next(iter(document['protocols'].values()))['metric']}")
    axis.set_title(f"same mean eps = {document['target']['mean_eps']:g}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    return _save(figure, out / ACCURACY_FIGURE)


def _known(steps: list[int], values: list[float | None]) -> tuple[list[int], list[float]]:
    """The points of a curve that have a value (null: no model known at that step), joined across gaps."""
    points = [(step, float(value)) for step, value in zip(steps, values) if value is not None]
    return [step for step, _ in points], [value for _, value in points]


def _save(figure: plt.Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def designs(rows: Sequence[Mapping[str, object]], title: str, out: Path) -> Path:
    """Utility against mean and worst-pair ε, one row of panels per threat model, one colour per design."""
    models = list(dict.fromkeys(str(r["threat_model"]) for r in rows))
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(str(r["design"]) for r in rows))}
    figure, axes = plt.subplots(len(models), 2, figsize=(10, 3.8 * len(models)), squeeze=False, sharey=True)
    for axis_row, model in zip(axes, models):
        for axis, column in zip(axis_row, ("mean_eps", "worst_eps")):
            for r in rows:
                if r["threat_model"] == model:
                    x, y = float(r[column]), float(r["utility"])  # type: ignore[arg-type]
                    axis.scatter(x, y, s=40, color=colours[str(r["design"])])
                    axis.annotate(str(r["design"]), (x, y), textcoords="offset points", xytext=(5, 3), fontsize=8)
            axis.set_xlim(0, 1.15 * max(float(r[column]) for r in rows))  # type: ignore[arg-type]
            kind = str(rows[0]["utility_kind"])
            if kind == "mse":
                axis.set_yscale("log")
            axis.set_xlabel(f"{column.replace('_eps', '')} pairwise epsilon")
            axis.set_ylabel("MSE (per coordinate)" if kind == "mse" else f"test {kind}")
            axis.set_title(model, fontsize=9)
            axis.grid(True, which="major", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    return _save(figure, out / DESIGNS_FIGURE)
