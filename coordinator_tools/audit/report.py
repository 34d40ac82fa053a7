"""The audit report: one JSON document (schema in SCHEMA.md) and one CSV row per ordered pair.

`build_report` needs only the accountants' result and the run (any protocol's realized or
planned transcript), so the planner (a schedule from the topology, no logs) and the auditor
(a replayed one) write the same document. Figures and the HTML page are drawn from the
document alone.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse.csgraph import shortest_path

from coordinator_tools.audit.checks import Check, paper_undercounts
from coordinator_tools.audit.losses import PairwiseLosses
from node.topology import Topology

if TYPE_CHECKING:
    from coordinator_tools.audit.protocols.base import RealizedRun

SCHEMA_VERSION = "netdp.audit.report/1"
REPORT_FILE = "report.json"
PAIRS_FILE = "pairs.csv"
PAIR_COLUMNS = (
    "source", "observer", "hop_distance",
    "paper_rdp", "paper_eps",
    "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper", "exact_reconstructable", "exact_ill_conditioned",
    "empirical_eps_lower", "ldp_rdp", "ldp_eps", "paper_undercounts", "paper_corrected_rdp", "paper_corrected_eps",
    "realized_path_rdp", "realized_path_eps", "ex_ante_rdp", "ex_ante_eps",
)  # fmt: skip
SIMULATION_NOTE = (
    "noise came from the seeded simulation sampler: numbers describe an experiment, "
    "not a deployment (no protection against floating-point attacks)"
)
JsonNumber = float | str | None


def build_report(
    losses: PairwiseLosses,
    run: RealizedRun,
    *,
    checks: Sequence[Check] = (),
    sampler_kinds: Mapping[int, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The report document; `sampler_kinds` is None for a plan (no node ran), `extra` adds top-level keys."""
    if losses.n != run.n:
        raise ValueError(f"losses are for {losses.n} nodes, the run for {run.n}")
    undercounts = paper_undercounts(losses)
    report: dict[str, object] = {
        "schema": SCHEMA_VERSION,
        "protocol": run.protocol,
        "run": run.run_section(),
        "alpha": losses.alpha,
        "delta": losses.delta,
        "sigma": losses.sigma,
        "sensitivity": losses.sensitivity,
        "threat_model": losses.threat_model.describe(),
        "pairs": _pairs(losses, hop_distances(run.topology), set(undercounts)),
        "baselines": {
            "ldp": {"rdp": json_number(losses.ldp_rdp), "eps": json_number(losses.ldp_eps)},
            "central": {"rdp": json_number(losses.central_rdp), "eps": json_number(losses.central_eps)},
        },
        "summary": _summary(losses, undercounts, sampler_kinds),
        "checks": [check.to_json() for check in checks],
        "notes": list(losses.notes),
    }
    clashes = sorted(set(extra or {}) & set(report))
    if clashes:
        raise ValueError(f"extra report keys {clashes} would overwrite the schema's own")
    report.update(extra or {})
    return report


def write_report(report: Mapping[str, object], out_dir: Path, *, json_name: str = REPORT_FILE,
                 csv_name: str = PAIRS_FILE) -> tuple[Path, Path]:
    """Write the JSON document and the per-pair CSV into out_dir; return both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / json_name, out_dir / csv_name
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=PAIR_COLUMNS)
        writer.writeheader()
        writer.writerows(flat_pair(pair) for pair in report["pairs"])
    return json_path, csv_path


def flat_pair(pair: Mapping[str, object]) -> dict[str, object]:
    """One pair object as a CSV row: nested keys joined by '_', absent columns empty."""
    row: dict[str, object] = {}
    for key, value in pair.items():
        if isinstance(value, Mapping):
            row.update({f"{key}_{inner}": item for inner, item in value.items()})
        else:
            row[key] = value
    return {column: "" if row.get(column) is None else row[column] for column in PAIR_COLUMNS}


def worst_observers(report: Mapping[str, object], limit: int) -> list[int]:
    """The observers with the largest mean exact loss (upper end), worst first."""
    means = report["summary"]["mean_rdp_per_observer"]["exact_upper"]
    loss = [math.inf if x == "inf" else -math.inf if x is None else x for x in means]
    return sorted(range(len(loss)), key=lambda v: -loss[v])[:limit]


def observer_means(matrix: np.ndarray) -> np.ndarray:
    """Mean loss of each observer v, (1/n) sum_{u != v} matrix[u, v] (Muffliato Eq. 7's normalisation)."""
    n = matrix.shape[0]
    return np.where(np.eye(n, dtype=bool), 0.0, matrix).sum(axis=0) / n


def hop_distances(topology: Topology) -> np.ndarray:
    """Shortest-path hop counts between every pair of nodes of the published graph.

    A graph drawn per step counts hops in the union of the steps' graphs.
    """
    if topology.graph_shape == "erdos_renyi":
        graph = sum(topology.gossip_matrix_at(step) for step in range(topology.protocol.steps))
    else:
        graph = topology.gossip_matrix()
    return shortest_path(graph, unweighted=True, directed=False)


def _pairs(losses: PairwiseLosses, hops: np.ndarray, undercounts: set[tuple[int, int]]) -> list[dict[str, object]]:
    empirical = losses.empirical_eps_lower
    ldp_rdp, ldp_eps = losses.ldp_pairs("rdp"), losses.ldp_pairs("eps")
    pairs = []
    for u in range(losses.n):
        for v in range(losses.n):
            if u == v:
                continue
            pair: dict[str, object] = {
                "source": u,
                "observer": v,
                "hop_distance": int(hops[u, v]) if np.isfinite(hops[u, v]) else None,
                "paper": {"rdp": json_number(losses.paper_rdp[u, v]), "eps": json_number(losses.paper_eps[u, v])},
                "exact": {
                    "rdp": json_number(losses.exact_rdp[u, v]),
                    "eps": json_number(losses.exact_eps[u, v]),
                    "rdp_upper": json_number(losses.exact_rdp_upper[u, v]),
                    "eps_upper": json_number(losses.exact_eps_upper[u, v]),
                    "reconstructable": bool(losses.reconstructable[u, v]),
                    "ill_conditioned": bool(losses.ill_conditioned[u, v]),
                },
                "ldp": {"rdp": json_number(ldp_rdp[u, v]), "eps": json_number(ldp_eps[u, v])},
                "paper_undercounts": (u, v) in undercounts,
            }
            if empirical is not None and not math.isnan(empirical[u, v]):
                pair["empirical"] = {"eps_lower": json_number(empirical[u, v])}
            if losses.paper_corrected_rdp is not None:
                pair["paper_corrected"] = {"rdp": json_number(losses.paper_corrected_rdp[u, v]),
                                           "eps": json_number(losses.paper_corrected_eps[u, v])}
            for name, column in losses.columns.items():
                pair[name] = {"rdp": json_number(column.rdp[u, v]), "eps": json_number(column.eps[u, v])}
            pairs.append(pair)
    return pairs


def _summary(losses: PairwiseLosses, undercounts: list[tuple[int, int]],
             sampler_kinds: Mapping[int, str] | None) -> dict[str, object]:
    columns = {
        "paper": losses.paper_rdp,
        "exact": losses.exact_rdp,
        "exact_upper": losses.exact_rdp_upper,
        "ldp": losses.ldp_pairs("rdp"),
        **{name: column.rdp for name, column in losses.columns.items()},
    }
    means = {name: observer_means(matrix) for name, matrix in columns.items()}
    eps_only = np.isnan(losses.paper_rdp)  # a closed form stated in (eps, delta) only: compared in eps
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(eps_only, losses.exact_eps / losses.paper_eps, losses.exact_rdp / losses.paper_rdp)
    worst_first = sorted(undercounts, key=lambda pair: -ratio[pair])
    return {
        "exact_method": losses.exact_method,
        "mean_rdp_per_observer": {name: [json_number(x) for x in values] for name, values in means.items()},
        "max_mean_rdp": {name: _max_mean(values) for name, values in means.items()},
        "paper_undercounts": {
            "count": len(undercounts),
            "pairs": [
                {"source": u, "observer": v, "exact_over_paper": json_number(ratio[u, v])} for u, v in worst_first
            ],
        },
        "reconstructable_pairs": int(np.count_nonzero(losses.reconstructable)),
        "ill_conditioned_pairs": int(np.count_nonzero(losses.ill_conditioned)),
        "attacked_pairs": _attacked_pairs(losses),
        "sampler": _sampler_summary(sampler_kinds),
    }


def _attacked_pairs(losses: PairwiseLosses) -> int:
    empirical = losses.empirical_eps_lower
    return 0 if empirical is None else int(np.count_nonzero(~np.isnan(empirical)))


def _max_mean(values: np.ndarray) -> dict[str, object]:
    observer = None if np.isnan(values).all() else int(np.nanargmax(values))
    return {"observer": observer, "rdp": None if observer is None else json_number(values[observer])}


def _sampler_summary(sampler_kinds: Mapping[int, str] | None) -> dict[str, object] | None:
    """Which sampler each node ran; None for a plan. Simulation results are marked as such."""
    if sampler_kinds is None:
        return None
    nodes_by_kind: dict[str, list[int]] = {}
    for node, kind in sorted(sampler_kinds.items()):
        nodes_by_kind.setdefault(kind, []).append(node)
    simulation = "simulation" in nodes_by_kind
    return {"nodes_by_kind": nodes_by_kind, "simulation": simulation, "note": SIMULATION_NOTE if simulation else None}


def format_number(value: JsonNumber) -> str:
    """A report number for people: 4 significant digits, 'inf', or '-' for no value."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def json_number(value: float) -> JsonNumber:
    """A JSON-safe number: NaN (no value) becomes null, an infinite loss the string 'inf'."""
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
