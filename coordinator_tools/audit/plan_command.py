"""`netdp plan`: account a run before starting it, and calibrate its noise for a target loss.

The topology's protocol picks the planner (its auditor's `plan`): the planned schedule of
synchronous gossip, or simulated schedules of randomized gossip. `plan_topology` is the whole
plan as a function (the Python API calls it); `register` adds the sub-command, which prints
the plan's summary and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from coordinator_tools.arguments import count, non_negative, positive, probability, renyi_order
from coordinator_tools.audit.checks import Check, loss_checks, not_computed_pairs
from coordinator_tools.audit.collusion import (
    PLAN_NOTE,
    Collusion,
    add_colluders_argument,
    coalition_members,
    coalition_threat_model,
    require_eavesdropper_views,
    require_joint_views,
    threat_model_argument,
)
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import CSV_AUTO_MAX_N
from coordinator_tools.audit.plan import (
    Plan,
    PlanOptions,
    Target,
    summarize,
)
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.report import Report, build_report, hop_distances, write_report
from coordinator_tools.audit.run_audit import DEFAULT_DELTA
from coordinator_tools.audit.sentences import NO_NOISE
from node.topology import Topology, load_topology


def calibrated_sigma(topology: Topology, target_mean_eps: float, delta: float) -> float:
    """The σ `netdp plan --target-mean-eps` finds: the smallest whose mean exact ε at δ is at most the target.

    The mean is Muffliato's rule, max over observers v of (1/n) Σ_{u≠v} ε_{u→v}.
    """
    plan = auditor_named(topology.protocol.name).plan(
        topology, PlanOptions(delta=delta, target=Target(target_mean_eps, "mean")))
    return float(plan.details["calibration"]["sigma"]["exact"])


@dataclass(frozen=True)
class PlanReport:
    """A plan written to disk: the planner's result, the report document, its checks and files."""

    plan: Plan
    report: Report  # the audit report's schema (`report_schema.AuditReport`), with its `plan` block
    checks: tuple[Check, ...]
    written: tuple[Path, ...]
    collusion: Collusion | None = None

    @property
    def document(self) -> dict[str, object]:
        """The plan file's document."""
        return self.report.document

    @property
    def ok(self) -> bool:
        """Every check passed (what `netdp plan` exits 0 for)."""
        return all(check.ok for check in self.checks)

    def summary(self) -> str:
        """What `netdp plan` prints: the headline, losses and calibration, the coalition, failed checks, the files."""
        lines = [_summary(self.plan)]
        if self.collusion is not None:
            lines.append(self.collusion.sentence())
        lines += [f"{'check failed' if not check.ok else '⚠ warning'}: {check.name}: {check.detail}"
                  for check in self.checks if check.level != "pass"]
        lines.append(f"wrote {', '.join(map(str, self.written))}")
        return "\n".join(lines)


def plan_topology(topology: Topology, out: Path, options: PlanOptions = PlanOptions(), *,
                  colluders: Sequence[int] = (), csv: bool = False) -> PlanReport:
    """Account the run `topology` describes before it happens and write the plan to `out` (e.g. plan.json).

    The pairs file goes beside it (<out stem>-pairs.parquet, and its CSV with `csv` or for small
    runs). `colluders` adds the report's collusion block: those observers as one coalition.
    """
    auditor = auditor_named(topology.protocol.name)
    members: tuple[int, ...] = ()
    if options.threat_model.eavesdropper:
        require_eavesdropper_views(auditor, colluders)
    if colluders:
        require_joint_views(auditor)
        members = coalition_members(colluders, topology.n)
    result = auditor.plan(topology, options)
    checks = loss_checks(result.losses)
    extra: dict[str, object] = {"plan": result.details}
    collusion = None
    if members:
        losses = result.losses
        joint = auditor.plan(topology, replace(
            options, threat_model=coalition_threat_model(options.threat_model, members), target=None,
            sigma=losses.sigma, sensitivity=losses.sensitivity, alpha=losses.alpha)).losses
        collusion = Collusion(members, joint, losses, hop_distances(topology), notes=(PLAN_NOTE,))
        checks += collusion.checks()
        extra["collusion"] = collusion.to_json()
    report = build_report(result.losses, result.run, checks=checks, extra=extra, pairs_stem=f"{out.stem}-pairs",
                          csv=csv)
    written = write_report(report, out.parent, json_name=out.name)
    return PlanReport(result, report, tuple(checks), tuple(written), collusion)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `netdp plan` to the CLI."""
    parser = subparsers.add_parser(
        "plan",
        help="pairwise privacy loss of a planned run, T_stop, and the noise a target loss needs",
        description="Account the run TOPO describes before it happens (paper bound, exact loss of each whole "
        "view, local-DP and central-DP baselines): synchronous Muffliato as if every node completed every round "
        "(with Muffliato's T_stop), randomized Muffliato ex ante over simulated schedules, ring-sum on its fixed "
        "path, walk-sum ex ante over simulated walks. With a target, find "
        "the smallest sigma that meets it. Options left out take the topology's values. Writes OUT (the audit "
        "report's schema) and beside it the pairs file, one row per ordered pair (plan-pairs.parquet for OUT "
        f"plan.json); with --csv, or when n <= {CSV_AUTO_MAX_N}, also its CSV export (plan-pairs.csv).",
    )
    parser.add_argument("topology", metavar="TOPO", type=Path, help="published topology file")
    parser.add_argument("--out", type=Path, required=True, help="plan file to write, e.g. plan.json")
    parser.add_argument("--csv", action="store_true",
                        help=f"also export the pairs as CSV (written anyway when n <= {CSV_AUTO_MAX_N})")
    parser.add_argument("--rounds", type=count, help="muffliato: gossip rounds T")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--plain", dest="accelerated", action="store_false", default=None,
                      help="muffliato: plain gossip")
    mode.add_argument("--accelerated", dest="accelerated", action="store_true", help="muffliato: Chebyshev gossip")
    parser.add_argument("--schedules", type=count,
                        help="muffliato-async, walk-sum: simulated schedules or walks to average over (default 20); "
                             "rw-sgd: walks of the exact mixture (default 200) and of the ex-ante column (default: "
                             "drawn until its intervals are narrow, as the audit does)")
    parser.add_argument("--seed", type=int,
                        help="muffliato-async, walk-sum, rw-sgd: seed of the simulated schedules or walks (default 0)")
    parser.add_argument("--sigma", type=non_negative, help="noise std each node adds once")
    parser.add_argument("--sensitivity", type=positive, help="l2 sensitivity Delta of a node's input")
    parser.add_argument("--alpha", type=renyi_order, help="Renyi order of the RDP columns")
    parser.add_argument("--delta", type=probability, default=DEFAULT_DELTA,
                        help=f"delta of the (eps, delta) columns and of the target (default {DEFAULT_DELTA:g})")
    parser.add_argument("--conversion", choices=("tight", "paper"), default="tight",
                        help="the paper columns' (eps, delta): tight (default: by the exact Gaussian profile of their "
                        "per-pair mu, the exact column's own conversion, so both compare on one basis), or paper "
                        "(the paper's own eps + ln(1/delta)/(alpha-1) at alpha, to reproduce published figures)")
    parser.add_argument("--own-noise-unknown", action="store_true",
                        help="observer knows only its own input, not its own noise (Muffliato Eq. 5)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--target-mean-eps", type=positive, metavar="EPS",
                        help="calibrate sigma so that max over observers of the mean exact eps is <= EPS")
    target.add_argument("--target-worst-eps", type=positive, metavar="EPS",
                        help="calibrate sigma so that every pair's exact eps is <= EPS")
    threat_model_argument(parser)
    add_colluders_argument(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    options = PlanOptions(
        sigma=args.sigma,
        sensitivity=args.sensitivity,
        alpha=args.alpha,
        delta=args.delta,
        conversion=args.conversion,
        threat_model=ThreatModel(observer_knows_own_noise=not args.own_noise_unknown,
                                 eavesdropper=args.threat_model == "eavesdropper"),
        target=_target(args),
        rounds=args.rounds,
        accelerated=args.accelerated,
        schedules=args.schedules,
        seed=args.seed,
    )
    plan = plan_topology(load_topology(args.topology), args.out, options, colluders=args.colluders, csv=args.csv)
    print(plan.summary())
    return 0 if plan.ok else 1


def _target(args: argparse.Namespace) -> Target | None:
    if args.target_mean_eps is not None:
        return Target(args.target_mean_eps, "mean")
    if args.target_worst_eps is not None:
        return Target(args.target_worst_eps, "worst")
    return None


def _summary(result: Plan) -> str:
    """One screen: the run's shape, its noise, and the headline losses against the baselines."""
    losses, details = result.losses, result.details
    lines = [result.headline]
    if losses.sigma == 0:
        lines.append(NO_NOISE)
    else:
        eps = losses.exact_eps_upper
        missing = int(np.count_nonzero(not_computed_pairs(losses)))
        if missing:  # a mean over the computed pairs only would understate the loss: none is shown
            shown = (f"not computed for {missing} of {losses.n * (losses.n - 1)} pairs (see the notes)"
                     + (f", worst computed pair {summarize(eps, 'worst'):.4g}" if missing < losses.n * (losses.n - 1)
                        else ""))
        else:
            shown = (f"worst pair {summarize(eps, 'worst'):.4g}, worst observer's mean (over u ≠ v, divided by n) "
                     f"{summarize(eps, 'mean'):.4g}")
        lines.append(f"exact eps at delta {losses.delta:g}: {shown}; LDP {losses.ldp_eps:.4g}, "
                     f"central {losses.central_eps:.4g}")
    calibration = details.get("calibration")
    if isinstance(calibration, dict):
        sigmas = calibration["sigma"]
        lines.append(f"sigma for {calibration['rule']} eps <= {calibration['target_eps']:g}: "
                     f"exact {sigmas['exact']:.6g}, LDP {sigmas['ldp']:.6g}, central {sigmas['central']:.6g}")
    return "\n".join(lines)
