"""The Python API, for notebooks: topology, data, run, audit and plan in a few calls, results as DataFrames.

Each function calls the library function behind the matching `netdp` command (`topology generate`,
`data generate`, `run [--virtual]`, `audit`, `plan`, `sweep`), never the command line itself, and
writes the same files, so a notebook and the command line can be mixed on one run; what this module
adds is reading those files back as pandas DataFrames.

    topo = api.topology("hypercube", 16, sigma=1.0)
    data = api.write_data(api.synthetic_data(topo, seed=0), "data")
    audit = api.audit(api.run(topo, data, "run", seed=1))
    audit.pairs.nlargest(5, "exact_eps_upper")
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from coordinator_tools.audit.conversion import Conversion
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target
from coordinator_tools.audit.plan_command import plan_topology
from coordinator_tools.audit.report import REPORT_FILE
from coordinator_tools.audit.report_schema import AuditReport
from coordinator_tools.audit.run_audit import DEFAULT_DELTA, AuditOptions, audit_run
from coordinator_tools.cluster.command import report_failures
from coordinator_tools.cluster.launch import TOPOLOGY_FILE, ClusterResult, LaunchOptions, run_cluster
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.dataprep.datasets import output_folder, synthetic_data, write_node_files
from coordinator_tools.sweep.command import run_sweep, sweep_grid
from coordinator_tools.sweep.state import CSV_FILE as SWEEP_CSV
from coordinator_tools.topology.build import DerivedWeighting, build_topology, new_run_id
from coordinator_tools.topology.generators import GENERATORS, generate, public_seed
from coordinator_tools.topology.protocol_options import DEFAULT_PROTOCOL, GraphFacts, params_from_fields
from node.breaks import Breaks
from node.errors import ConfigError
from node.topology import FixedSchedule, Topology, load_topology, save_topology

__all__ = [
    "Audit", "Run", "Topology", "audit", "load_topology", "plan", "run", "save_topology", "sweep",
    "synthetic_data", "topology", "write_data",
]  # fmt: skip

TopologySource = Topology | Path | str


def topology(graph: str | nx.Graph, n: int | None = None, *, protocol: str = DEFAULT_PROTOCOL,
             seed: int | None = None, weighting: DerivedWeighting = "metropolis", run_id: str | None = None,
             **params: object) -> Topology:
    """A published topology, as `netdp topology generate` makes it (save it with `save_topology`).

    `graph` is a generator kind (`GENERATORS`) or a networkx graph on nodes 0..n-1. Keyword
    arguments the generator takes (rows, cols, c, radius, ...) go to it; the others are fields
    of the protocol's Params (sigma, sensitivity, rounds, accelerated, steps, ...), and the ones
    left out get the command line's defaults (T_stop rounds, Delta = 1, ...).
    """
    if isinstance(graph, nx.Graph):
        graph_name, built, graph_seed = "networkx", graph, None
    else:
        takes = GENERATORS[graph].parameters if graph in GENERATORS else {}
        graph_seed = public_seed(graph, seed)
        graph_options = {name: value for name, value in params.items() if name in takes}
        params = {name: value for name, value in params.items() if name not in takes}
        graph_name, built = graph, generate(graph, n=n, seed=graph_seed, **graph_options)
    schedule = FixedSchedule()
    fields = params_from_fields(protocol, params, GraphFacts(built, weighting, None, schedule))
    return build_topology(built, graph_name=graph_name, run_id=run_id or new_run_id(graph_name), protocol=fields,
                          weighting=weighting, graph_seed=graph_seed, schedule=schedule)


def write_data(values: np.ndarray, out: Path | str) -> Path:
    """Write one data file per node (row v of `values` to out/node-<v>.json) into a new or empty folder."""
    out = output_folder(Path(out), force=False)
    write_node_files(values, out)
    return out


@dataclass(frozen=True)
class Run:
    """A finished run: its folder (logs, estimates, run.json) and what each node left there."""

    result: ClusterResult

    @property
    def rundir(self) -> Path:
        return self.result.rundir

    @property
    def ok(self) -> bool:
        """Every node finished (nodes killed on purpose aside) before the timeout."""
        return self.result.ok

    @property
    def topology(self) -> Topology:
        return self.result.topology

    @cached_property
    def estimates(self) -> pd.DataFrame:
        """One row per node that wrote an estimate (index `node`), one column per coordinate x0, x1, ..."""
        estimates = self.result.estimates()
        rows = np.array([np.atleast_1d(estimates[v]) for v in sorted(estimates)])
        columns = [f"x{i}" for i in range(rows.shape[1])] if len(rows) else []
        return pd.DataFrame(rows, index=pd.Index(sorted(estimates), name="node"), columns=columns)

    def check(self) -> Run:
        """This run, or a NetdpError naming every node that failed with its last words (as `netdp run`)."""
        report_failures(self.result)
        return self


def run(topology: TopologySource, data: Path | str, out: Path | str, *, virtual: bool = True,
        seed: int | None = None, insecure: bool = False, canaries: int = 0,
        breaks: Mapping[int, str | Sequence[str]] | None = None, **launch: object) -> Run:
    """Run the topology on the data folder into the new folder `out`, as `netdp run [--virtual]` does.

    `seed` picks the seeded simulation sampler (reproducible noise: an experiment, not a deployment);
    without it every node draws from the secure sampler. A networked run (virtual=False) starts one
    process per address on this machine and needs `certs_dir=` (from `netdp certs`) or insecure=True.
    `canaries=M` makes it an audit run (`--canaries M`: its audit's empirical column tests the run);
    `breaks={node: "noise-scale=0.25"}` (or a list of such specs) breaks nodes on purpose (`--break`, a
    negative control). Other keyword arguments are `LaunchOptions` fields (timeout_s, kill_at_round, ...).
    """
    if not virtual and launch.get("certs_dir") is None and not insecure:
        raise ConfigError("a networked run needs certs_dir= (from `netdp certs`) or insecure=True")
    parsed = {node: Breaks.parsed([specs] if isinstance(specs, str) else specs)
              for node, specs in (breaks or {}).items()}
    options = LaunchOptions(sampler="secure" if seed is None else "simulation", simulation_seed=seed,
                            canaries=canaries, breaks=parsed, **launch)
    runner = run_virtual if virtual else run_cluster
    with _topology_file(topology) as path:
        return Run(runner(path, Path(data), Path(out), options))


@dataclass(frozen=True)
class Audit:
    """An audit or plan report (`coordinator_tools/audit/SCHEMA.md`) with its tables as DataFrames."""

    path: Path  # the report document (report.json, or the plan's file)
    report: dict[str, object]
    text: str = ""  # what the command printed (plans: the headline and calibration)

    @cached_property
    def pairs(self) -> pd.DataFrame:
        """The pairs file: one row per ordered pair source -> observer, null read as NaN."""
        return pd.DataFrame(read_pairs(self.path))

    @cached_property
    def model(self) -> AuditReport:
        """The report checked against its schema (`coordinator_tools/audit/report_schema.py`), read by attribute."""
        return AuditReport.model_validate(self.report)

    @property
    def summary(self) -> pd.DataFrame:
        """The report's statistics of every loss column over the pairs (count, mean, min, max, quantiles)."""
        summary = self.model.summary
        rows = {name: {"count": stats.count, "mean": stats.mean, "min": stats.min, "max": stats.max,
                       **{f"q{level:g}": value for level, value in zip(summary.quantile_levels, stats.quantiles)}}
                for name, stats in summary.pair_columns.items()}
        return pd.DataFrame.from_dict(rows, orient="index").map(_number)

    @property
    def observers(self) -> pd.DataFrame:
        """Mean RDP per observer v, (1/n) Σ_{u≠v} (Muffliato Eq. 7): columns paper, exact (= exact_upper), exact_upper,
        exact_lower, ldp."""
        means = self.model.summary.mean_rdp_per_observer
        frame = pd.DataFrame({column: values for column, values in means.items() if values is not None})
        return frame.rename_axis("observer").map(_number)

    @property
    def checks(self) -> pd.DataFrame:
        """The report's checks: name, level (pass, warning or fail: a warning holds but says something is not what it
        seems), ok, detail."""
        return pd.DataFrame([check.model_dump() for check in self.model.checks],
                            columns=["name", "level", "ok", "detail"])

    @property
    def ok(self) -> bool:
        """Every check passed (what `netdp audit` and `netdp plan` exit 0 for)."""
        return all(check.ok for check in self.model.checks)


def audit(run_or_rundir: Run | Path | str, out: Path | str | None = None, *, data: Path | str | None = None,
          with_private_logs: bool = False, **options: object) -> Audit:
    """Audit a finished run into `out` (default RUNDIR/audit), as `netdp audit` does.

    `data` (learning runs) adds the utility block; with_private_logs (test mode) also checks that
    the transcript reproduces every logged payload. Other keyword arguments are `AuditOptions`
    fields (delta, alpha, attack_pairs, attack_runs, attack_seed, colluders, ...).
    """
    rundir = run_or_rundir.rundir if isinstance(run_or_rundir, Run) else Path(run_or_rundir)
    out = rundir / "audit" if out is None else Path(out)
    audit_options = AuditOptions(data=None if data is None else Path(data), with_private_logs=with_private_logs,
                                 **options)
    return Audit(out / REPORT_FILE, audit_run(rundir, out, audit_options))


def plan(topology: TopologySource, out: Path | str, *, sigma: float | None = None, sensitivity: float | None = None,
         alpha: float | None = None, delta: float = DEFAULT_DELTA, conversion: Conversion = "tight",
         own_noise_unknown: bool = False, target_mean_eps: float | None = None,
         target_worst_eps: float | None = None, rounds: int | None = None, accelerated: bool | None = None,
         plain: bool = False, schedules: int | None = None, seed: int | None = None,
         colluders: Sequence[int] = (), csv: bool = False) -> Audit:
    """Account the run the topology describes before it happens, as `netdp plan TOPO --out OUT` does.

    The keywords are `netdp plan`'s options, underscores for dashes: sigma=0.5, rounds=4,
    plain=True (or accelerated=False), target_mean_eps=1.0, schedules=50, colluders=[0, 1], ...;
    left out, they take the topology's values. The report is written to `out` (e.g. plan.json)
    with its pairs file beside it; `text` is what the command prints.
    """
    if target_mean_eps is not None and target_worst_eps is not None:
        raise ConfigError("give target_mean_eps or target_worst_eps, not both")
    if plain and accelerated:
        raise ConfigError("give plain or accelerated, not both")
    target = (Target(target_mean_eps, "mean") if target_mean_eps is not None
              else Target(target_worst_eps, "worst") if target_worst_eps is not None else None)
    options = PlanOptions(sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta, conversion=conversion,
                          threat_model=ThreatModel(observer_knows_own_noise=not own_noise_unknown), target=target,
                          rounds=rounds, accelerated=False if plain else accelerated, schedules=schedules, seed=seed)
    out = Path(out)
    topology = topology if isinstance(topology, Topology) else load_topology(Path(topology))
    planned = plan_topology(topology, out, options, colluders=colluders, csv=csv)
    return Audit(out, planned.document, planned.summary() + "\n")


def sweep(out: Path | str, *, grid: Path | str | None = None, **axes: object) -> pd.DataFrame:
    """Run a grid of audited runs into `out` (or resume it there), as `netdp sweep --out OUT` does: its sweep.csv.

    The keywords are `netdp sweep`'s grid options, underscores for dashes, a list (or one value)
    for each axis: protocol=["muffliato"], graph=["hypercube", "ring"], n=[16], sigma=[0.5, 1, 2]
    (or target_eps=[...]), rounds=[4], networked=True, ...; or grid=FILE, a JSON grid file. A point
    that failed is not in the table (sweep.json says why); calling again with the same grid reruns
    only the points without a row.
    """
    out = Path(out)
    run_sweep(sweep_grid(axes, None if grid is None else Path(grid), source="api.sweep"), out)
    return pd.read_csv(out / SWEEP_CSV)


@contextlib.contextmanager
def _topology_file(topology: TopologySource) -> Iterator[Path]:
    """A path to the topology: the file given, or a temporary copy of a Topology (commands read files)."""
    if not isinstance(topology, Topology):
        yield Path(topology)
        return
    with tempfile.TemporaryDirectory(prefix="netdp-topology-") as folder:
        path = Path(folder) / TOPOLOGY_FILE
        save_topology(topology, path)
        yield path


def _number(value: object) -> object:
    """A report's number as a float: "inf" (the schema's infinite loss) is math.inf and null is NaN."""
    if value is None:
        return math.nan
    if value == "inf":
        return math.inf
    return value
