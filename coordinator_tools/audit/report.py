"""The audit report: one JSON document (`report_schema.AuditReport`, documented in SCHEMA.md) pointing to a columnar
file of the pairs.

`build_report` needs only the accountants' result and the run (any protocol's realized or
planned transcript), so the planner (a schedule from the topology, no logs) and the auditor
(a replayed one) write the same document. The n(n - 1) pairs go to the pairs file
(`pairs_file`: Parquet, written from the accountants' arrays); the document keeps what a reader needs
without it: per-observer means, distributions of every column, and the worst pairs. Its `pairs`
list holds every pair as an object (`{source, observer, exact: {rdp, eps, ...}, ldp: {...}, ...}`; `exact`'s
`rdp`/`eps` are the upper end of its interval, `rdp_lower`/`eps_lower` the lower)
while that stays small (n <= 256), and the pairs of largest exact loss beyond. Figures and the
HTML page are drawn from the document and the pairs file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse.csgraph import shortest_path

from coordinator_tools.audit.attack import CONFIDENCE, resolution_limit
from coordinator_tools.audit.checks import (
    PAPER_VARIANTS,
    Check,
    PaperVariant,
    paper_undercounts,
    paper_variants,
    undercount_ratio,
)
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.pairs_file import (
    BOOLEAN_COLUMNS,
    INTEGER_COLUMNS,
    PAIR_COLUMNS,
    PAIRS_FORMAT,
    REPORT_FILE,
    ROW_GROUP_ROWS,
    PairTable,
    wants_csv,
    write_pairs,
    write_pairs_csv,
)
from coordinator_tools.audit.report_schema import SCHEMA_VERSION, AuditReport, JsonNumber, ReportCore, dump_report
from node.topology import Topology

if TYPE_CHECKING:
    from coordinator_tools.audit.realized import RealizedRun

PAIRS_STEM = "pairs"
# Pairs the summary lists by name: the largest exact losses, the largest paper undercounts.
SHOWN_PAIRS = 20
# Up to this n the document lists every pair as an object too (65,280 pairs at 256 nodes).
INLINE_PAIRS_MAX_N = 256
# The units of the pairs file's loss columns: `<column>_<unit>` becomes `{<column>: {<unit>: ...}}` in a pair object.
PAIR_UNITS = ("rdp_upper", "eps_upper", "rdp_lower", "eps_lower", "rdp", "eps", "reconstructable", "ill_conditioned")
QUANTILE_LEVELS = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
SIMULATION_NOTE = (
    "noise came from the seeded simulation sampler: numbers describe an experiment, "
    "not a deployment (no protection against floating-point attacks)"
)
# How every per-observer mean of the report is taken (observer_means): said wherever one is shown.
MEAN_RULE = "over sources u ≠ v, divided by n (Muffliato Eq. 7)"


@dataclass(frozen=True)
class Report:
    """The report and the pairs its `pairs` pointer names, written together by `write_report`."""

    model: AuditReport
    pairs: PairTable

    @cached_property
    def document(self) -> dict[str, object]:
        """The report as report.json holds it (JSON values, only the keys that were given)."""
        return dump_report(self.model)


def build_report(
    losses: PairwiseLosses,
    run: RealizedRun,
    *,
    checks: Sequence[Check] = (),
    sampler_kinds: Mapping[int, str] | None = None,
    extra: Mapping[str, object] | None = None,
    pairs_stem: str = PAIRS_STEM,
    csv: bool = False,
) -> Report:
    """The report; `sampler_kinds` is None for a plan (no node ran), `extra` adds top-level keys.

    The pairs file is named `pairs_stem`.parquet; the CSV export `pairs_stem`.csv is written when
    `csv` asks for it or the run is small (`wants_csv`).
    """
    if losses.n != run.n:
        raise ValueError(f"losses are for {losses.n} nodes, the run for {run.n}")
    undercounts = {variant: paper_undercounts(losses, variant) for variant in paper_variants(losses)}
    table = pair_table(losses, hop_distances(run.topology), undercounts)
    core: dict[str, object] = {
        "schema": SCHEMA_VERSION,
        "protocol": run.protocol,
        "run": run.run_section(),
        "alpha": losses.alpha,
        "delta": losses.delta,
        "sigma": losses.sigma,
        "sensitivity": losses.sensitivity,
        "threat_model": losses.threat_model.describe(),
        "pairs": listed_pairs(table, losses),
        "pairs_listed": _listing(table),
        "pairs_file": {
            "file": f"{pairs_stem}.{PAIRS_FORMAT}",
            "format": PAIRS_FORMAT,
            "rows": table.rows,
            "row_group_rows": ROW_GROUP_ROWS,
            "columns": table.names,
            "csv": f"{pairs_stem}.csv" if wants_csv(losses.n, csv) else None,
        },
        "baselines": {
            "ldp": {"rdp": json_number(losses.ldp_rdp), "eps": json_number(losses.ldp_eps)},
            "central": {"rdp": json_number(losses.central_rdp), "eps": json_number(losses.central_eps)},
        },
        "summary": _summary(losses, table, undercounts, sampler_kinds),
        "checks": [check.to_json() for check in checks],
        "notes": list(losses.notes),
        "column_definitions": dict(losses.definitions),
        **({} if losses.assumptions is None else {"assumptions": losses.assumptions}),
    }
    clashes = sorted(set(extra or {}) & set(core) | set(extra or {}) & set(ReportCore.model_fields))
    if clashes:
        raise ValueError(f"extra report keys {clashes} would overwrite the schema's own")
    return Report(AuditReport.model_validate({**core, **(extra or {})}), table)


def write_report(report: Report, out_dir: Path, *, json_name: str = REPORT_FILE) -> list[Path]:
    """Write the pairs file (and its CSV export, when the pointer names one), then the JSON document, into
    out_dir; return the paths written, the document first."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pointer = report.model.pairs_file
    written = [write_pairs(report.pairs, out_dir / pointer.file)]
    if pointer.csv is not None:
        written.append(write_pairs_csv(report.pairs, out_dir / pointer.csv))
    else:  # a report written again without the export must not leave an older one beside it
        (out_dir / Path(pointer.file).with_suffix(".csv")).unlink(missing_ok=True)
    json_path = out_dir / json_name
    json_path.write_text(json.dumps(report.document, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return [json_path, *written]


def pair_table(losses: PairwiseLosses, hops: np.ndarray, undercounts: Mapping[PaperVariant, np.ndarray]) -> PairTable:
    """Every column of the pairs file from the accountants' arrays (no copies of the loss matrices);
    `undercounts` flags, per closed form the run has, the pairs where it is below the exact loss."""
    named: dict[str, np.ndarray | None] = {
        "hop_distance": hops,
        "paper_rdp": losses.paper_rdp, "paper_eps": losses.paper_eps,
        "exact_rdp": losses.exact_rdp, "exact_eps": losses.exact_eps,
        "exact_rdp_upper": losses.exact_rdp_upper, "exact_eps_upper": losses.exact_eps_upper,
        "exact_rdp_lower": losses.exact_rdp_lower, "exact_eps_lower": losses.exact_eps_lower,
        "exact_reconstructable": losses.reconstructable, "exact_ill_conditioned": losses.ill_conditioned,
        "empirical_eps_lower": losses.empirical_eps_lower,
        "model_attack_eps_lower": losses.model_attack_eps_lower,
        "ldp_rdp": losses.ldp_pairs("rdp"), "ldp_eps": losses.ldp_pairs("eps"),
        "paper_undercounts": undercounts["paper"],
        "paper_corrected_rdp": losses.paper_corrected_rdp, "paper_corrected_eps": losses.paper_corrected_eps,
        "paper_corrected_undercounts": undercounts.get("paper_corrected"),
        **{f"{name}_{unit}": array for name, column in losses.columns.items()
           for unit, array in column.units().items()},
        **losses.facts,
    }  # fmt: skip
    order = [*PAIR_COLUMNS[2:], *(name for name in named if name not in PAIR_COLUMNS)]
    return PairTable(losses.n, {name: named.get(name) for name in order})


def listed_pairs(table: PairTable, losses: PairwiseLosses) -> list[dict[str, object]]:
    """The pairs the document lists, as objects: all of them up to INLINE_PAIRS_MAX_N nodes, else the
    SHOWN_PAIRS of largest exact ε (upper end), largest first."""
    if table.n <= INLINE_PAIRS_MAX_N:
        chosen = [(u, v) for u in range(table.n) for v in range(table.n) if u != v]
    else:
        chosen = _largest(losses.exact_eps_upper, ~np.eye(table.n, dtype=bool))
    units = [(name, *_unit_of(name)) for name, matrix in table.columns.items() if matrix is not None]
    return [_pair_object(table, units, u, v) for u, v in chosen]


def _unit_of(column: str) -> tuple[str | None, str]:
    """A pairs-file column as (the pair object's sub-object, key): `exact_rdp_upper` -> ("exact", "rdp_upper");
    a column of no unit (`hop_distance`, `paper_undercounts`, a fact) stays a key of the pair itself."""
    for unit in PAIR_UNITS:
        if column.endswith("_" + unit):
            return column.removesuffix("_" + unit), unit
    return None, column


def _pair_object(table: PairTable, units: Sequence[tuple[str, str | None, str]], u: int, v: int) -> dict[str, object]:
    """One pair as the document lists it; a sub-object with no value at all (e.g. an unattacked pair's
    `empirical`) is left out."""
    pair: dict[str, object] = {"source": u, "observer": v}
    groups: dict[str, dict[str, object]] = {}
    for name, group, key in units:
        value = table.columns[name][u, v]
        if name in INTEGER_COLUMNS:
            value = int(value) if np.isfinite(value) else None
        elif name in BOOLEAN_COLUMNS:
            value = bool(value)
        else:
            value = json_number(float(value))
        if group is None:
            pair[key] = value
        else:
            groups.setdefault(group, {})[key] = value
    pair.update((group, values) for group, values in groups.items() if any(x is not None for x in values.values()))
    return pair


def _listing(table: PairTable) -> dict[str, object]:
    """What `pairs` lists, so that a reader never takes a few pairs for all of them."""
    every = table.n <= INLINE_PAIRS_MAX_N
    return {"count": table.rows if every else min(SHOWN_PAIRS, table.rows), "of": table.rows,
            "which": "all" if every else "largest exact_eps_upper first; every pair is in pairs_file"}


def worst_observers(report: ReportCore, limit: int) -> list[int]:
    """The observers with the largest mean exact loss (upper end), worst first."""
    means = report.summary.mean_rdp_per_observer["exact_upper"]
    loss = [math.inf if x == "inf" else -math.inf if x is None else x for x in means]
    return sorted(range(len(loss)), key=lambda v: -loss[v])[:limit]


def observer_means(matrix: np.ndarray) -> np.ndarray:
    """Mean loss of each observer v, (1/n) sum_{u != v} matrix[u, v] (Muffliato Eq. 7's normalisation: the sum
    over the n - 1 sources, divided by n), scaled so that huge finite losses do not overflow the sum."""
    n = matrix.shape[0]
    values = np.where(np.eye(n, dtype=bool), 0.0, matrix)
    scale = float(np.abs(values[np.isfinite(values)]).max(initial=0.0)) or 1.0
    return (values / scale).sum(axis=0) / n * scale


def hop_distances(topology: Topology) -> np.ndarray:
    """Shortest-path hop counts between every pair of nodes of the published graph.

    A graph drawn per step counts hops in the union of the steps' graphs.
    """
    if topology.graph_shape == "erdos_renyi":
        graph = sum(topology.gossip_matrix_at(step) for step in range(topology.protocol.steps))
    else:
        graph = topology.gossip_matrix()
    return shortest_path(graph, unweighted=True, directed=False)


def _summary(losses: PairwiseLosses, table: PairTable, undercounts: Mapping[PaperVariant, np.ndarray],
             sampler_kinds: Mapping[int, str] | None) -> dict[str, object]:
    means = {unit: {name: observer_means(matrix) for name, matrix in _mean_columns(losses, unit).items()}
             for unit in ("rdp", "eps")}
    off_diagonal = ~np.eye(losses.n, dtype=bool)
    return {
        "exact_method": losses.exact_method,
        "mean_rdp_per_observer": {name: [json_number(x) for x in values] for name, values in means["rdp"].items()},
        "mean_eps_per_observer": {name: [json_number(x) for x in values] for name, values in means["eps"].items()},
        "max_mean_rdp": {name: _max_mean(values) for name, values in means["rdp"].items()},
        "quantile_levels": list(QUANTILE_LEVELS),
        "pair_columns": _distributions(table),
        "top_pairs": [
            {"source": u, "observer": v, "hop_distance": _hops(table, u, v),
             **{name: json_number(table.columns[name][u, v])
                for name in ("exact_rdp_upper", "exact_eps_upper", "paper_rdp", "paper_eps")}}
            for u, v in _largest(losses.exact_eps_upper, off_diagonal & ~np.isnan(losses.exact_eps_upper))
        ],
        "paper_conversion": losses.paper_conversion,
        **{f"{variant}_undercounts": _undercount_summary(losses, variant, undercounts[variant], table)
           if variant in undercounts else None for variant in PAPER_VARIANTS},
        "reconstructable_pairs": int(np.count_nonzero(losses.reconstructable)),
        "ill_conditioned_pairs": int(np.count_nonzero(losses.ill_conditioned)),
        "attacked_pairs": _audited_pairs(losses.model_attack_eps_lower),
        "model_attack_limit": _model_attack_limit(losses),
        "canary_pairs": _audited_pairs(losses.empirical_eps_lower),
        "sampler": _sampler_summary(sampler_kinds),
    }


def _undercount_summary(losses: PairwiseLosses, variant: PaperVariant, below: np.ndarray,
                        table: PairTable) -> dict[str, object]:
    """Where one closed form is below the exact loss: how many pairs, the worst ones, and how many at each hop
    distance (of how many pairs there)."""
    ratio = undercount_ratio(losses, variant)
    hops = np.asarray(table.columns["hop_distance"], dtype=float)
    reachable = np.isfinite(hops) & ~np.eye(table.n, dtype=bool)
    distance = hops[reachable].astype(np.int64)
    pairs_at = np.bincount(distance)
    below_at = np.bincount(distance, weights=below[reachable], minlength=pairs_at.size)
    return {
        "count": int(np.count_nonzero(below)),
        "pairs": [{"source": u, "observer": v, "exact_over_paper": json_number(ratio[u, v])}
                  for u, v in _largest(ratio, below)],
        "by_hop_distance": [{"hop_distance": int(d), "count": int(below_at[d]), "of": int(pairs_at[d])}
                            for d in np.flatnonzero(pairs_at)],
        "exact_given": losses.exact_given,
        "exact_is_bound": losses.exact_is_bound,
    }


def _mean_columns(losses: PairwiseLosses, unit: str) -> dict[str, np.ndarray]:
    """The columns whose per-observer means the summary lists, in RDP or in ε at the report's δ."""
    corrected = getattr(losses, f"paper_corrected_{unit}")
    columns = {
        "paper": getattr(losses, f"paper_{unit}"),
        **({} if corrected is None else {"paper_corrected": corrected}),
        "exact": getattr(losses, f"exact_{unit}_upper"),
        "exact_upper": getattr(losses, f"exact_{unit}_upper"),
        "exact_lower": getattr(losses, f"exact_{unit}_lower"),
        "ldp": losses.ldp_pairs(unit),
    }
    for name, column in losses.columns.items():
        upper = column.units().get(f"{unit}_upper")
        if upper is not None:  # an estimate leads with the upper end of its interval
            columns[f"{name}_upper"] = upper
        columns[name] = getattr(column, unit)
    return columns


def _model_attack_limit(losses: PairwiseLosses) -> dict[str, object] | None:
    """The largest ε the replay attack can certify with its replay count (None: no replay attack ran)."""
    if losses.attack_runs is None:
        return None
    attacked = _audited_pairs(losses.model_attack_eps_lower)
    return {"eps": json_number(resolution_limit(losses.attack_runs, losses.delta, attacked)),
            "replays": losses.attack_runs, "pairs": attacked, "confidence": CONFIDENCE}


def _distributions(table: PairTable) -> dict[str, dict[str, object]]:
    """Count, mean, extremes and quantiles over the pairs of every number column that has a value."""
    out = {}
    for name, matrix in table.columns.items():
        if matrix is None or name in INTEGER_COLUMNS | BOOLEAN_COLUMNS:
            continue
        values = table.off_diagonal(name)
        values = values[~np.isnan(values)]
        if values.size == 0:
            continue
        mean = _mean(values)
        quantiles = np.quantile(values, QUANTILE_LEVELS, method="inverted_cdf")  # values that occur: inf stays inf
        out[name] = {"count": int(values.size), "mean": json_number(mean), "min": json_number(values.min()),
                     "max": json_number(values.max()), "quantiles": [json_number(q) for q in quantiles]}
    return out


def _mean(values: np.ndarray) -> float:
    """The mean, scaled so that huge finite losses (a nearly noiseless run) do not overflow the sum."""
    scale = float(np.abs(values[np.isfinite(values)]).max(initial=0.0)) or 1.0
    with np.errstate(invalid="ignore"):  # inf and -inf together have no mean
        return float(np.mean(values / scale) * scale)


def _largest(values: np.ndarray, where: np.ndarray, limit: int = SHOWN_PAIRS) -> list[tuple[int, int]]:
    """The (u, v) of the `limit` largest values among the pairs `where` marks, largest first (NaN last)."""
    candidates = np.flatnonzero(where)
    key = values.ravel()[candidates]
    key = np.where(np.isnan(key), -np.inf, key)
    if candidates.size > limit:
        kept = np.argpartition(-key, limit - 1)[:limit]
        candidates, key = candidates[kept], key[kept]
    order = np.lexsort((candidates, -key))
    return [(int(u), int(v)) for u, v in zip(*np.unravel_index(candidates[order], values.shape))]


def _hops(table: PairTable, u: int, v: int) -> int | None:
    hops = table.columns["hop_distance"][u, v]
    return int(hops) if np.isfinite(hops) else None


def _audited_pairs(column: np.ndarray | None) -> int:
    """How many pairs a lower-bound column has a value for."""
    return 0 if column is None else int(np.count_nonzero(~np.isnan(column)))


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
