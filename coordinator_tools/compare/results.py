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

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import summarize
from coordinator_tools.compare.calibrate import Calibration
from coordinator_tools.compare.setup import GOSSIP, CompareSetup

COMPARISON_FILE = "comparison.json"
# The audit's columns each protocol is judged by: (name in comparison.json, column of the pairs file).
REALIZED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    GOSSIP: (("exact", "exact_eps_upper"),),
    "rw-sgd": (("ex_ante", "ex_ante_eps"), ("realized_path", "realized_path_eps")),
}


def mean_per_hop(pairs: Mapping[str, np.ndarray], column: str) -> dict[str, float]:
    """Mean ε over the pairs at each hop distance, keyed by the distance (as a string, for JSON)."""
    values, hops = pairs[column], pairs["hop_distance"]
    known = ~np.isnan(values) & ~np.isnan(hops)
    return {str(int(distance)): float(np.mean(values[known & (hops == distance)]))
            for distance in np.unique(hops[known])}


def protocol_result(calibration: Calibration, report: Mapping[str, object], folder: Path) -> dict[str, object]:
    """One protocol's entry of comparison.json (the pairs are read from the audit folder, `folder`/audit)."""
    utility = report["utility"]
    columns = REALIZED_COLUMNS[calibration.protocol]
    pairs = read_pairs(folder / "audit", ["source", "observer", "hop_distance", *(column for _, column in columns)])
    n = int(report["run"]["n"])
    return {
        "sigma": calibration.sigma,
        "noise_multiplier": calibration.sigma / float(report["sensitivity"]),
        "alpha": calibration.alpha,
        "calibration": {"column": calibration.column, "plan_evaluations": calibration.evaluations},
        "planned_mean_eps": calibration.planned_mean_eps,
        "realized_mean_eps": {name: summarize(pair_matrix(pairs, column, n), "mean") for name, column in columns},
        "ldp_eps": float(report["baselines"]["ldp"]["eps"]),
        "metric": utility["metric"],
        "accuracy": {"run": utility["netdp"][-1], "trusted_curator": utility["central"][-1],
                     "local": utility["local"][-1], "initial": utility["initial"]},
        "accuracy_curve": {"steps": utility["steps"], "run": utility["netdp"], "trusted_curator": utility["central"],
                           "local": utility["local"]},
        "mean_eps_per_hop": {name: mean_per_hop(pairs, column) for name, column in columns},
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
