"""One point of a sweep: its σ, topology, data, run and audit in points/<id>/, and its CSV row.

σ is the point's, or the smallest σ whose planned mean exact ε meets the point's target (`netdp
plan --target-mean-eps`: the protocol's planner, Muffliato's mean rule max_v (1/n) Σ_u ε_{u→v},
bisection to a relative 1e-6 on σ, rounded up), at the T the topology publishes (muffliato
without --rounds: T_stop at σ = 1, kept at the calibrated σ; muffliato-async: ex ante over the
planner's simulated schedules, so the run's own schedule lands near the target, not on it). Runs
use the seeded simulation sampler (master seed `noise_seed`); the audit's attack, `attack_seed`.

Utility, and the local-DP and central-DP baselines at the same noise (Muffliato §2.2):
* averaging (muffliato, muffliato-async): `mse` = (1/(nD)) Σ_v ‖x_v − x̄‖² over the nodes' final
  estimates x_v, per coordinate as in Muffliato Thm 2 (`theory.muffliato_mse_bound`), x̄ the mean
  of the clipped inputs (the audit's `utility.mse`). Local DP: every node releases x_v + η_v and the
  estimate is their mean. Central DP: a trusted aggregator releases the mean of the clipped
  inputs with the noise of the mean of the n draws, N(0, σ²/n per coordinate), the release whose ε
  the audit's `baselines.central` gives (μ = Δ/(σ√n)). Both release the same value, so they share
  one utility and differ in ε: `baseline_utility` is the realized MSE of mean_v (clip(x_v) + η_v)
  from the run's own draws (its private logs), σ²/n per coordinate in expectation. (The audit's
  `utility.local` is another baseline: every node keeping its own noisy input, no averaging.)
* learning (muffliato-gd or decor-gd, the setup of `netdp compare`: logistic regression on a bundled dataset,
  minibatch 16, clip 1, one example's privacy): `accuracy`, the test accuracy after the last step,
  mean over nodes (the audit's `utility.netdp`); `baseline_utility` the audit's `utility.central`
  (a trusted aggregator adding the noise of the mean, σ/√n: the same model as local DP with every
  node's noisy gradient averaged, and as central DP at the same noise).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import summarize
from coordinator_tools.audit.plan_command import calibrated_sigma
from coordinator_tools.audit.replay import read_private_logs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.command import report_failures
from coordinator_tools.cluster.launch import ClusterResult, LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.compare.command import CERT_VALIDITY_DAYS
from coordinator_tools.compare.setup import GOSSIP, GOSSIP_ALPHA, CompareSetup
from coordinator_tools.dataprep.datasets import output_folder, synthetic_data, write_node_files
from coordinator_tools.dataprep.learning_data import write_minibatch_split
from coordinator_tools.sweep.grid import Point, SweepGrid, length_field, point_graph
from coordinator_tools.topology.build import build_topology, new_run_id
from coordinator_tools.topology.protocol_options import GraphFacts, params_from_fields
from node.codec import from_tensor
from node.errors import ConfigError
from node.protocols.registry import protocol_spec
from node.topology import FixedSchedule, ProtocolParams, Topology, save_topology

START_SIGMA = 1.0  # the σ a target point's topology is first built at (muffliato's default T is T_stop there)


def learning_setup(point: Point, grid: SweepGrid, steps: int) -> CompareSetup:
    """The learning setup of `netdp compare` (and the Muffliato-GD demo) at the point's graph and steps."""
    return CompareSetup(graph=point.graph, n=point.n, graph_seed=point.graph_seed or 0, dataset=grid.dataset,
                        steps_per_node=steps)


def learning_params(point: Point, setup: CompareSetup, sigma: float, facts: GraphFacts) -> ProtocolParams:
    """The point's learning protocol on `netdp compare`'s task: Muffliato-GD's fields, those the protocol shares.

    A learning protocol other than Muffliato-GD (decor-gd, a plug-in) takes the same task, clip, batch,
    steps and learning rate, and its own defaults for the rest (decor-gd's sigma_cor_ratio).
    """
    gossip = setup.params(GOSSIP, sigma, GOSSIP_ALPHA, point.n)
    if point.protocol == gossip.name:
        return gossip
    shared = {field: value for field, value in gossip.model_dump().items()
              if field in protocol_spec(point.protocol).params.model_fields and field != "name"}
    return params_from_fields(point.protocol, shared, facts)  # type: ignore[return-value]


def point_topology(point: Point, grid: SweepGrid, sigma: float, *, length: int | None = None,
                   addresses: list[str] | None = None) -> Topology:
    """The point's published topology at noise σ and length T (None: the point's own T, or its default)."""
    graph = point_graph(point)
    length = point.length if length is None else length
    facts = GraphFacts(graph, "metropolis", None, FixedSchedule())
    if point.learning:
        params: ProtocolParams = learning_params(point, learning_setup(point, grid, length), sigma, facts)
    else:
        fields: dict[str, object] = {"sigma": sigma, "dimension": grid.dimension}
        if length is not None:
            fields[length_field(point.protocol)] = length
        params = params_from_fields(point.protocol, fields, facts)
    return build_topology(graph, graph_name=point.graph, run_id=new_run_id(f"sweep-{point.protocol}"),
                          protocol=params, graph_seed=point.graph_seed, addresses=addresses)


def published_length(topology: Topology) -> int:
    """T as the topology publishes it: rounds, ticks per node or gradient steps."""
    return int(getattr(topology.protocol, length_field(topology.protocol.name)))


def write_point_data(point: Point, grid: SweepGrid, topology: Topology, data_dir: Path) -> None:
    """Synthetic inputs (averaging) or the dataset's iid split (learning), drawn from the point's data seed."""
    if point.learning:
        setup = learning_setup(point, grid, published_length(topology))
        write_minibatch_split(grid.dataset, setup.batch, topology, data_dir, point.data_seed)
    else:
        write_node_files(synthetic_data(topology, seed=point.data_seed), output_folder(data_dir, force=False))


def check_point(point: Point, grid: SweepGrid, scratch: Path) -> None:
    """Refuse, before any run, a point whose graph, parameters or data cannot be made (scratch: an empty folder)."""
    try:
        topology = point_topology(point, grid, point.sigma or START_SIGMA)
    except ValueError as exc:  # the Params model's validation
        raise ConfigError(f"point {point.id}: {exc}") from None
    if point.learning:
        write_point_data(point, grid, topology, scratch)


def run_point(point: Point, grid: SweepGrid, folder: Path) -> dict[str, object]:
    """Calibrate, publish, run and audit the point into `folder` (new or empty); return its CSV row."""
    started = time.monotonic()
    addresses = [f"127.0.0.1:{port}" for port in free_loopback_ports(point.n)] if grid.networked else None
    sigma = point.sigma
    topology = point_topology(point, grid, START_SIGMA if sigma is None else sigma, addresses=addresses)
    if point.target_eps is not None:
        sigma = calibrated_sigma(topology, point.target_eps, grid.delta)
        topology = point_topology(point, grid, sigma, length=published_length(topology), addresses=addresses)
    folder.mkdir(parents=True, exist_ok=True)
    save_topology(topology, folder / "topology.json")
    data_dir = folder / "data"
    write_point_data(point, grid, topology, data_dir)
    certs_dir = None
    if grid.networked and not grid.insecure:
        certs_dir = folder / "certs"
        write_cluster_certs(topology, certs_dir, CERT_VALIDITY_DAYS)
    runner = run_cluster if grid.networked else run_virtual
    run = runner(folder / "topology.json", data_dir, folder / "run",
                 LaunchOptions(sampler="simulation", simulation_seed=point.noise_seed, certs_dir=certs_dir))
    report_failures(run)
    report = audit_run(run.rundir, folder / "audit",
                       AuditOptions(data=data_dir, delta=grid.delta, attack_seed=point.attack_seed))
    metric, utility, baseline = learning_utility(report) if point.learning else averaging_mse(run, report)
    pairs = read_pairs(folder / "audit", ["source", "observer", "exact_eps_upper", "paper_eps"])
    exact, paper = (pair_matrix(pairs, column, topology.n) for column in ("exact_eps_upper", "paper_eps"))
    return {
        "point": point.id, "protocol": point.protocol, "graph": point.graph, "n": topology.n,
        "T": published_length(topology), "sigma": sigma, "target_eps": point.target_eps, "delta": grid.delta,
        "mode": "networked" if grid.networked else "virtual",
        "graph_seed": point.graph_seed, "data_seed": point.data_seed, "noise_seed": point.noise_seed,
        "attack_seed": point.attack_seed,
        "utility_metric": metric, "utility": utility, "baseline_utility": baseline,
        "mean_exact_eps": summarize(exact, "mean"), "worst_exact_eps": summarize(exact, "worst"),
        "mean_paper_eps": summarize(paper, "mean") if np.any(~np.isnan(paper)) else None,
        "ldp_eps": float(report["baselines"]["ldp"]["eps"]),
        "central_eps": float(report["baselines"]["central"]["eps"]),
        "mean_exact_rdp": float(report["summary"]["max_mean_rdp"]["exact_upper"]["rdp"]), "alpha": report["alpha"],
        "elapsed_s": round(time.monotonic() - started, 3), "checks_ok": all(check["ok"] for check in report["checks"]),
    }  # fmt: skip


def averaging_mse(run: ClusterResult, report: dict[str, object]) -> tuple[str, float, float]:
    """("mse", the audit's MSE of the run per coordinate, the baselines' realized MSE from the run's inputs and draws).

    Both against the mean of the clipped inputs (the audit reads them from the point's data folder).
    """
    topology = run.topology
    private, problems = read_private_logs(run.rundir)
    if len(private.inputs) < topology.n:
        why = f" ({problems[0].detail})" if problems else ""
        raise ConfigError(f"{run.rundir}: some node's private log is unusable{why}; no baseline to compare with")
    inputs = np.array([private.inputs[v] for v in range(topology.n)])
    released = inputs + np.array([from_tensor(private.draws[v][0].value) for v in range(topology.n)])
    mse = float(report["utility"]["mse"])
    return "mse", mse, float(np.mean((released.mean(axis=0) - inputs.mean(axis=0)) ** 2))


def learning_utility(report: dict[str, object]) -> tuple[str, float, float]:
    """(metric, the run's test metric after the last step, the trusted aggregator's at the same noise)."""
    utility = report["utility"]  # the audit's, since learning points are audited with their data folder
    return utility["metric"], float(utility["netdp"][-1]), float(utility["central"][-1])
