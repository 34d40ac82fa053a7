"""`netdp compare --designs`: noise designs for private averaging, calibrated to one target, run, audited.

(`--task learning` runs the designs that learn through the same loop: `compare.learning_designs`.)

Every design averages the same synthetic vectors (the ball of radius Δ/2, Δ = 1) on the same
graph, with σ calibrated by the planner so that its exact loss against a curious node meets the
same target (mean or worst-pair ε at δ = 1e-5). The protocol designs run for real and are audited
twice: against each curious node (it knows its own draws and the secrets it shares) and, where the
protocol's auditor accounts it, against an eavesdropper who sees every message and holds no secret.
The baselines are closed forms at the same target: local DP (every node releases its input once,
the mean of the n releases) and central DP (a trusted curator adds noise to the mean once).

Choices a reader should know (also in designs.json's `notes`):
* muffliato runs accelerated for as many rounds as the graph's diameter (every input reaches every
  node; more rounds would let each observer reconstruct more of its neighbours' inputs).
* decor averages with noise in round 0 only (`noisy_rounds` = 1): every later round's fresh noise
  would stay in the network's mean and raise the MSE T-fold while protecting little more. Its
  pairwise noise is DECOR_RATIO × σ, and it gossips until the pairwise terms' residual MSE is at
  most MIX_SHARE of the mean's (|λ|^T from the gossip matrix's second-largest eigenvalue modulus).
* zero-sum (Zip-DL) draws fresh zero-sum shares every round, as the paper does, for as many rounds as
  the graph's diameter: its shares never move the mean, and each round's are mixed out as gossip mixes.
* secure-neighbourhood draws node noise every round, as Koskela & Kulkarni analyse it, for as many
  rounds as the graph's diameter, with its default masks (MASK_RATIO σ): the mean keeps every round's noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from coordinator_tools.audit.conversion import gaussian_epsilon, squared_mu
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, baseline_sigmas, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.run_audit import DEFAULT_DELTA, AuditOptions, audit_run
from coordinator_tools.topology.build import build_topology
from node.errors import ConfigError
from node.mixing import metropolis_weight
from node.protocols.decor import DecorParams
from node.protocols.muffliato import MuffliatoParams
from node.protocols.secure_neighbourhood import SecureNeighbourhoodParams
from node.protocols.zero_sum import ZeroSumParams
from node.topology import ProtocolParams, Topology

DESIGNS = ("muffliato", "decor", "zero-sum", "secure-neighbourhood", "ldp", "central")
BASELINES = ("ldp", "central")
PROTOCOL_DESIGNS = ("muffliato", "decor", "zero-sum", "secure-neighbourhood")  # each runs either task
TASKS = ("averaging", "learning")
CURIOUS, EAVESDROPPER = "curious-observer", "eavesdropper"
CSV_FILE, JSON_FILE = "designs.csv", "designs.json"
COLUMNS = ("design", "threat_model", "mean_eps", "worst_eps", "utility", "utility_kind")
DECOR_RATIO = 30.0  # σ_cor / σ: at 30 the curious node's mean ε is within 2% of the n → ∞ limit (64-node hypercube)
MIX_SHARE = 0.01  # the pairwise terms' residual MSE, at most this share of the mean's noise σ²/n
MASK_RATIO = SecureNeighbourhoodParams.model_fields["mask_ratio"].default  # secure-neighbourhood's own default
ALPHA = 2.0  # the published Rényi order: a label only, the exact column is a Gaussian (ε, δ)


def chosen_designs(names: Sequence[str]) -> tuple[str, ...]:
    """The designs asked for, in order, or a one-line ConfigError naming what is available."""
    unknown = [name for name in names if name not in DESIGNS]
    if unknown:
        raise ConfigError(f"--designs: {unknown[0]} is no design; available: {', '.join(DESIGNS)}")
    if not names:
        raise ConfigError(f"--designs: name at least one of {', '.join(DESIGNS)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class DesignSetup:
    """What every design shares: the graph, the vectors' dimension and sensitivity, and the target."""

    graph: nx.Graph
    graph_name: str
    target: Target
    dimension: int = 256  # the measured MSE per coordinate varies by √(2/D) ≈ 9% between runs (decor's, one draw)
    sensitivity: float = 1.0
    delta: float = DEFAULT_DELTA

    @property
    def n(self) -> int:
        return int(self.graph.number_of_nodes())

    def topology(self, params: ProtocolParams, run_id: str, addresses: Sequence[str] | None = None) -> Topology:
        """The published topology of one design on the shared graph (Metropolis weights)."""
        return build_topology(self.graph, graph_name=self.graph_name, run_id=run_id, protocol=params,
                              addresses=addresses)

    def params(self, design: str, sigma: float) -> ProtocolParams:
        """A protocol design's published parameters at noise σ."""
        common = dict(sigma=sigma, sensitivity=self.sensitivity, alpha=ALPHA, dimension=self.dimension)
        if design == "muffliato":
            return MuffliatoParams(**common, rounds=nx.diameter(self.graph), accelerated=True)
        if design == "zero-sum":
            return ZeroSumParams(**common, rounds=nx.diameter(self.graph))
        if design == "secure-neighbourhood":
            return SecureNeighbourhoodParams(**common, rounds=nx.diameter(self.graph))
        return averaging_decor(self.graph, **common)


def averaging_decor(graph: nx.Graph, **params: object) -> DecorParams:
    """DECOR for averaging: noise in round 0 only at σ_cor = DECOR_RATIO σ, then `mixing_rounds` without noise."""
    return DecorParams(**params, rounds=1 + mixing_rounds(graph), noisy_rounds=1,  # type: ignore[arg-type]
                       sigma_cor_ratio=DECOR_RATIO)


def mixing_rounds(graph: nx.Graph) -> int:
    """Noise-free rounds after which deg·ratio²·|λ|^(2T) σ² (the pairwise residual) is at most MIX_SHARE · σ²/n,
    λ the second-largest eigenvalue modulus of the graph's Metropolis matrix."""
    n = graph.number_of_nodes()
    weights = np.zeros((n, n))
    for v, w in graph.edges:
        weights[v, w] = weights[w, v] = metropolis_weight(graph.degree[v], graph.degree[w])
    weights += np.diag(1.0 - weights.sum(axis=1))
    second = float(np.sort(np.abs(np.linalg.eigvalsh(weights)))[-2])
    degree = max(d for _, d in graph.degree())
    bound = math.sqrt(MIX_SHARE / (n * degree * DECOR_RATIO**2))
    return 1 if second <= 0 else max(1, math.ceil(math.log(bound) / math.log(second)))


def calibrated(setup: DesignSetup, design: str) -> ProtocolParams:
    """The design's parameters at the smallest σ whose planned exact loss meets the target."""
    draft = setup.topology(setup.params(design, setup.sensitivity), run_id=f"plan-{design}")
    plan = auditor_named(draft.protocol.name).plan(draft, PlanOptions(delta=setup.delta, target=setup.target))
    sigma = float(plan.details["calibration"]["sigma"]["exact"])  # type: ignore[index]
    return setup.params(design, sigma)


def baseline_rows(setup: DesignSetup, design: str, threat_models: Sequence[str]) -> list[dict[str, object]]:
    """A closed-form baseline at the target: one release per node (ldp) or of the mean (central); the same ε
    under every threat model. Its MSE per coordinate is σ²/n: ldp averages n releases at σ, central's noise on
    the mean is σ/√n (its σ is the node noise whose sum hides one input as the curator's noise does)."""
    sigma = baseline_sigmas(setup.n, sensitivity=setup.sensitivity, delta=setup.delta, target=setup.target)[design]
    mean_eps, worst_eps = baseline_eps(setup, design, sigma)
    return [row(design, model, mean_eps, worst_eps, sigma**2 / setup.n) for model in threat_models]


def baseline_eps(setup: DesignSetup, design: str, sigma: float, releases: int = 1) -> tuple[float, float]:
    """A baseline's (mean, worst-pair) ε at σ: every pair sees u's `releases` noisy releases (ldp) or their
    share of the mean (central)."""
    geometry = np.full((setup.n, setup.n), float(releases) if design == "ldp" else releases / setup.n)
    np.fill_diagonal(geometry, np.nan)
    mu = np.sqrt(squared_mu(np.nan_to_num(geometry), sigma=sigma, sensitivity=setup.sensitivity))
    eps = np.where(np.isnan(geometry), np.nan, gaussian_epsilon(mu, setup.delta))
    return summarize(eps, "mean"), summarize(eps, "worst")


def mse(report: Mapping[str, Any]) -> float:
    """An averaging run's utility: the MSE per coordinate its report measured."""
    return float(report["utility"]["mse"])


def audited_rows(design: str, rundir: Path, folder: Path, data_dir: Path, delta: float, *,
                 protocol: str | None = None, utility: Callable[[Mapping[str, Any]], float] = mse,
                 utility_kind: str = "mse") -> list[dict[str, object]]:
    """Audit a design's run (of `protocol`, the design's name by default) under each threat model its auditor
    accounts; one row each, its utility read off the report."""
    rows = []
    eavesdropper = auditor_named(protocol or design).eavesdropper_views
    for model, name in ((CURIOUS, "audit"), *(((EAVESDROPPER, "audit-eavesdropper"),) if eavesdropper else ())):
        options = AuditOptions(data=data_dir, delta=delta, attack_pairs="none", eavesdropper=model == EAVESDROPPER)
        report = audit_run(rundir, folder / name, options)
        n = int(report["run"]["n"])  # type: ignore[index]
        eps = pair_matrix(read_pairs(folder / name, ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", n)
        rows.append(row(design, str(report["threat_model"]["name"]), summarize(eps, "mean"),  # type: ignore[index]
                        summarize(eps, "worst"), utility(report), utility_kind))
    return rows


def row(design: str, threat_model: str, mean_eps: float, worst_eps: float, utility: float,
        utility_kind: str = "mse") -> dict[str, object]:
    """One line of designs.csv."""
    return dict(zip(COLUMNS, (design, threat_model, mean_eps, worst_eps, utility, utility_kind), strict=True))


Rows = list[dict[str, object]]


def run_designs(setup: DesignSetup, designs: Sequence[str], out: Path, data_dir: Path,
                run: Callable[[ProtocolParams, Path], Path], *,
                audit: Callable[[str, Path, Path], Rows] | None = None,
                baselines: Callable[[str, Sequence[str]], Rows] | None = None) -> Rows:
    """Every design's rows: protocol designs calibrated, run by `run(params, folder) -> rundir` and audited
    (`audit(design, rundir, folder)`; averaging's by default), then the baselines under the threat models the
    protocols were audited under (`baselines(design, threat_models)`; averaging's by default)."""
    rows: Rows = []
    for design in designs:
        if design in BASELINES:
            continue
        rundir = run(calibrated(setup, design), out / design)
        rows += (audit(design, rundir, out / design) if audit is not None
                 else audited_rows(design, rundir, out / design, data_dir, setup.delta))
    models = list(dict.fromkeys(str(r["threat_model"]) for r in rows)) or [CURIOUS]
    for design in designs:
        if design in BASELINES:
            rows += baseline_rows(setup, design, models) if baselines is None else baselines(design, models)
    return rows


def notes(setup: DesignSetup, designs: Sequence[str]) -> list[str]:
    """The choices behind the numbers, for designs.json and the console."""
    lines = [f"target: {setup.target.rule} eps {setup.target.epsilon:g} at delta {setup.delta:g} against a curious "
             "node (it knows its own draws and the secrets it shares); eavesdropper rows audit the same runs"]
    if "muffliato" in designs:
        lines.append(f"muffliato: accelerated, {nx.diameter(setup.graph)} rounds (the graph's diameter); its "
                     "auditor does not account an eavesdropper")
    if "decor" in designs:
        lines.append(f"decor: noise in round 0 only (noisy_rounds = 1), sigma_cor = {DECOR_RATIO:g} sigma, then "
                     f"{mixing_rounds(setup.graph)} noise-free rounds (pairwise residual at most {MIX_SHARE:g} of the "
                     "mean's MSE); the paper's every-round noise is for learning")
    if "zero-sum" in designs:
        lines.append(f"zero-sum: fresh zero-sum shares every round (the paper's), {nx.diameter(setup.graph)} rounds "
                     "(the graph's diameter)")
    if "secure-neighbourhood" in designs:
        lines.append(f"secure-neighbourhood: node noise every round (the paper's), {nx.diameter(setup.graph)} rounds "
                     f"(the graph's diameter), masks at {MASK_RATIO:g} sigma; each round's noise stays in the mean")
    if any(d in BASELINES for d in designs):
        lines.append("ldp and central: closed forms at the same target (one Gaussian release per node / of the "
                     "mean); their utility is the expected MSE, the protocols' the measured one")
    return lines


def write_csv(rows: Sequence[Mapping[str, object]], path: Path) -> Path:
    """designs.csv: COLUMNS exactly, one row per design and threat model."""
    lines = [",".join(COLUMNS)]
    lines += [",".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path
