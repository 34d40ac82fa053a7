"""comparison.json: what `netdp compare` measured, read from the two audit reports.

Per protocol: σ and the order α it was planned at, the planned mean ε (the calibration's), the
realized mean ε by the same rule from the audit's pairs (Muffliato-GD: `exact` upper end; the
walk: `realized_path` and `ex_ante`), local DP, the final test metric of the run, the trusted
curator and the nodes alone (the audit's `utility` block, last step), and the mean ε per hop
distance of each column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coordinator_tools.audit.plan import summarize
from coordinator_tools.compare.calibrate import Calibration
from coordinator_tools.compare.setup import GOSSIP, CompareSetup

COMPARISON_FILE = "comparison.json"
# The audit's columns each protocol is judged by: (name in comparison.json, pair key, eps key).
REALIZED_COLUMNS: dict[str, tuple[tuple[str, str, str], ...]] = {
    GOSSIP: (("exact", "exact", "eps_upper"),),
    "rw-sgd": (("ex_ante", "ex_ante", "eps"), ("realized_path", "realized_path", "eps")),
}


def pair_matrix(report: Mapping[str, object], pair_key: str, eps_key: str) -> np.ndarray:
    """One column of the report's pairs as an n x n matrix [u, v] (NaN on the diagonal and where null)."""
    pairs = report["pairs"]
    n = 1 + max(int(pair["source"]) for pair in pairs)
    matrix = np.full((n, n), np.nan)
    for pair in pairs:
        value = pair[pair_key][eps_key]
        matrix[pair["source"], pair["observer"]] = np.nan if value is None else float(value)
    return matrix


def mean_per_hop(report: Mapping[str, object], pair_key: str, eps_key: str) -> dict[str, float]:
    """Mean ε over the pairs at each hop distance, keyed by the distance (as a string, for JSON)."""
    by_hop: dict[int, list[float]] = {}
    for pair in report["pairs"]:
        value, hops = pair[pair_key][eps_key], pair["hop_distance"]
        if value is not None and hops is not None:
            by_hop.setdefault(int(hops), []).append(float(value))
    return {str(hops): float(np.mean(values)) for hops, values in sorted(by_hop.items())}


def protocol_result(calibration: Calibration, report: Mapping[str, object], folder: Path) -> dict[str, object]:
    """One protocol's entry of comparison.json."""
    utility = report["utility"]
    columns = REALIZED_COLUMNS[calibration.protocol]
    return {
        "sigma": calibration.sigma,
        "noise_multiplier": calibration.sigma / float(report["sensitivity"]),
        "alpha": calibration.alpha,
        "calibration": {"column": calibration.column, "plan_evaluations": calibration.evaluations},
        "planned_mean_eps": calibration.planned_mean_eps,
        "realized_mean_eps": {name: summarize(pair_matrix(report, key, eps), "mean") for name, key, eps in columns},
        "ldp_eps": float(report["baselines"]["ldp"]["eps"]),
        "metric": utility["metric"],
        "accuracy": {"run": utility["netdp"][-1], "trusted_curator": utility["central"][-1],
                     "local": utility["local"][-1], "initial": utility["initial"]},
        "accuracy_curve": {"steps": utility["steps"], "run": utility["netdp"], "trusted_curator": utility["central"],
                           "local": utility["local"]},
        "mean_eps_per_hop": {name: mean_per_hop(report, key, eps) for name, key, eps in columns},
        "run": str(folder / "run"),
        "audit": str(folder / "audit"),
    }


def comparison(setup: CompareSetup, n: int, target: float, entries: Mapping[str, dict[str, object]],
               wall_time_s: float, data_seed: int) -> dict[str, object]:
    """The whole comparison.json document."""
    return {
        "graph": setup.graph,
        "n": n,
        "dataset": setup.dataset,
        "data_seed": data_seed,
        "target": {"mean_eps": target, "delta": setup.delta,
                   "rule": "max over observers v of (1/n) sum_u eps(u -> v) (Muffliato's mean rule)"},
        "setup": {"clip": setup.clip, "batch": setup.batch, "adjacency": "example", "sensitivity": setup.sensitivity,
                  "steps_per_node": setup.steps_per_node, "gossip_rounds": setup.gossip_rounds,
                  "walk_steps": n * setup.steps_per_node,
                  "learning_rate": {GOSSIP: setup.gossip_learning_rate, "rw-sgd": setup.walk_rate(n)}},
        "protocols": dict(entries),
        "wall_time_s": wall_time_s,
    }


def write_comparison(document: Mapping[str, object], out: Path) -> Path:
    """Write comparison.json into `out`; return its path."""
    path = out / COMPARISON_FILE
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
