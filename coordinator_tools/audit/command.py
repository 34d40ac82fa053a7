"""`netdp audit RUNDIR --out DIR`: replay the logs, account every pair, check, report, draw.

`audit_run` is the whole pipeline as a function (`netdp demo` calls it), for every protocol:
the replay picks the protocol's auditor from the logs' headers, and the auditor rebuilds,
accounts and checks the run. `register` adds the sub-command, which also prints a short
summary and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coordinator_tools.audit import attack, canary
from coordinator_tools.audit.averaging_utility import averaging_utility
from coordinator_tools.audit.collusion import (
    NO_ATTACK_NOTE,
    Collusion,
    add_colluders_argument,
    coalition_attack_pairs,
    coalition_members,
    coalition_threat_model,
    require_joint_views,
)
from coordinator_tools.audit.checks import loss_checks, replay_checks
from coordinator_tools.audit.combinations import combinations_block
from coordinator_tools.audit.conversion import Conversion
from coordinator_tools.audit.faults import fault_block, stopped_sentence
from coordinator_tools.audit.figures import write_figures
from coordinator_tools.audit.html import PAGE_FILE, write_html
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import CSV_AUTO_MAX_N
from coordinator_tools.audit.empirical import CanaryAudit, canary_audit, planted_canaries
from coordinator_tools.audit.payloads import STRIPPED, payloads_block
from coordinator_tools.audit.replay import Replay, read_canary_signs, replay_run
from coordinator_tools.audit.sentences import summary_sentences
from coordinator_tools.audit.report import (
    MEAN_RULE,
    REPORT_FILE,
    build_report,
    format_number,
    hop_distances,
    worst_observers,
    write_report,
)
from node.codec import from_tensor
from node.errors import ConfigError

DEFAULT_DELTA = 1e-5
# "auto" attacks every pair up to this many nodes: the attack costs about n^2 * runs * view size.
AUTO_ATTACK_MAX_N = 32
SHOWN_OBSERVERS = 10
NO_NOISE = "σ = 0: no privacy"
CHECK_MARKS = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "warning": "[yellow]⚠ warning[/]"}
AttackPairs = Literal["auto", "all", "none"] | tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class AuditOptions:
    """How to account a run; None means the topology's published value."""

    alpha: float | None = None
    delta: float = DEFAULT_DELTA
    observer_knows_own_noise: bool = True
    conversion: Conversion = "tight"
    attack_pairs: AttackPairs = "auto"
    attack_runs: int | None = None  # None: the protocol's attack's default
    attack_seed: int | None = None
    with_private_logs: bool = False
    data: Path | None = None  # learning runs: the data folder, for the utility block and replay checks (test mode)
    colluders: tuple[int, ...] = ()  # a coalition accounted as one observer (the report's `collusion` block)


def audit_run(rundir: Path, out_dir: Path, options: AuditOptions = AuditOptions(), *,
              csv: bool = False) -> dict[str, object]:
    """Audit RUNDIR into out_dir (report.json, pairs.parquet, figures, index.html); return the report document.

    `csv` asks for the pairs' CSV export too (written anyway for small runs, see `wants_csv`).

    Raises ConfigError when RUNDIR has no topology or names a protocol nobody audits, and
    LogFormatError when it has no usable log.
    """
    replay = replay_run(rundir, with_private_logs=options.with_private_logs, data_dir=options.data)
    auditor, run = replay.auditor, replay.realized
    members = ()
    if options.colluders:
        require_joint_views(auditor)
        members = coalition_members(options.colluders, run.n)
    accounting = _accounting(replay, options)
    runs = {} if options.attack_runs is None else {"attack_runs": options.attack_runs}
    attack_pairs = _resolve_attack_pairs(options.attack_pairs, run.n)
    losses = auditor.account(run, **accounting, attack_pairs=attack_pairs, rng_seed=options.attack_seed, **runs)
    canaries = _canary_block(replay, accounting, options.attack_seed)
    if isinstance(canaries, CanaryAudit):
        losses.empirical_eps_lower = canaries.eps_lower
        losses.notes.extend(canaries.notes)
    checks = loss_checks(losses, recompute=lambda sigma: auditor.account(run, **{**accounting, "sigma": sigma}))
    checks += replay_checks(replay)
    if isinstance(canaries, CanaryAudit):
        checks += canaries.checks
    collusion = None
    if members:
        joint = auditor.account(
            run, **{**accounting, "threat_model": coalition_threat_model(accounting["threat_model"], members)},
            attack_pairs=None if attack_pairs is None else coalition_attack_pairs(members, run.n),
            rng_seed=options.attack_seed, **runs,
        )  # fmt: skip
        collusion = Collusion(members, joint, losses, hop_distances(run.topology),
                              notes=(NO_ATTACK_NOTE,) if attack_pairs is None else ())
        checks += collusion.checks()
    extra = {
        "canaries": canaries.to_json() if isinstance(canaries, CanaryAudit) else canaries,
        "options": {**asdict(options), "data": None if options.data is None else str(options.data),
                    "sensitivity_published": replay.topology.protocol.sensitivity},
        "replay": replay.to_json(),
        "faults": fault_block(replay),
        "payloads": payloads_block(replay),
        **auditor.report_extras(replay, losses, accounting),
    }
    if collusion is not None:
        extra["collusion"] = collusion.to_json()
    if auditor.averaging:
        extra["combinations"] = combinations_block(replay, int(losses.reconstructable.sum()))
        extra["utility"] = averaging_utility(replay, options.data)
    elif options.data is not None:
        extra["utility"] = auditor.utility(replay, options.data)
    report = build_report(losses, run, checks=checks, sampler_kinds=replay.sampler_kinds, extra=extra, csv=csv)
    write_report(report, out_dir)
    write_html(report.document, out_dir, write_figures(report.document, out_dir, out_dir))
    return report.document


def _canary_block(replay: Replay, accounting: Mapping[str, object], seed: int | None
                  ) -> CanaryAudit | dict[str, object] | None:
    """The one-run canary audit of a run that planted canaries; the reason it was not computed; None: no canaries."""
    count = replay.topology.protocol.canaries
    if not count:
        return None
    if replay.payloads_stripped:
        return {"canaries": count, "pairs": 0, "reason": STRIPPED}
    coins, problems = read_canary_signs(replay.rundir, replay.topology)
    planted = planted_canaries({node: from_tensor(record.signs) for node, record in coins.items()},
                               {node: record.magnitude for node, record in coins.items()}, count)
    canary_model = replay.auditor.canary_model(replay.realized, planted)
    if canary_model is None:
        return {"canaries": count, "pairs": 0, "reason": f"the canaries of {replay.auditor.name} are not audited"}
    audit = canary_audit(canary_model, replay.logs, planted, dimension=replay.topology.protocol.dimension,
                         sigma=accounting["sigma"], sensitivity=accounting["sensitivity"], delta=accounting["delta"],
                         threat_model=accounting["threat_model"], seed=seed)
    audit.notes.extend(f"empirical: node {problem.node}'s canaries are not audited ({problem.detail})"
                       for problem in problems)
    return audit


def _accounting(replay: Replay, options: AuditOptions) -> dict[str, object]:
    """The arguments every account() call of this audit shares (the attack's are added once)."""
    params = replay.topology.protocol
    return {
        "sigma": params.sigma,
        "sensitivity": replay.effective_sensitivity,
        "alpha": params.alpha if options.alpha is None else options.alpha,
        "delta": options.delta,
        "threat_model": ThreatModel(observer_knows_own_noise=options.observer_knows_own_noise),
        "conversion": options.conversion,
    }


def _resolve_attack_pairs(choice: AttackPairs, n: int) -> Literal["all"] | list[tuple[int, int]] | None:
    """account()'s attack_pairs for a user's choice; named pairs must be distinct nodes of the run."""
    if choice == "auto":
        choice = "all" if n <= AUTO_ATTACK_MAX_N else "none"
    if choice == "none":
        return None
    if choice == "all":
        return "all"
    bad = [(u, v) for u, v in choice if u == v or not (0 <= u < n and 0 <= v < n)]
    if bad:
        raise ConfigError(f"--attack-pairs: {bad[0][0]}:{bad[0][1]} is not a pair of distinct nodes in 0..{n - 1}")
    return list(choice)


# --- command line ----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `netdp audit` to the CLI."""
    parser = subparsers.add_parser(
        "audit",
        help="measure what every node of a finished run leaked to every other",
        description="Replay the view logs of RUNDIR, check them, account the privacy loss of every ordered pair "
        "(paper bound, exact loss of the whole view, attack lower bound), check the invariants, and write "
        f"report.json, pairs.parquet (one row per ordered pair), figures and index.html into --out; pairs.csv "
        f"too with --csv or when n <= {CSV_AUTO_MAX_N}.",
        epilog="Exit status: 0 when every check passes, 1 when one fails, 2 on an unusable RUNDIR.",
    )
    parser.add_argument("rundir", metavar="RUNDIR", type=Path, help="run directory written by 'netdp run'")
    parser.add_argument("--out", type=Path, required=True, help="folder for the report (created if missing)")
    parser.add_argument("--force", action="store_true", help="overwrite a report already in --out")
    parser.add_argument("--csv", action="store_true",
                        help=f"also export the pairs as pairs.csv (written anyway when n <= {CSV_AUTO_MAX_N})")
    parser.add_argument("--alpha", type=float, help="Renyi order of the report (default: the topology's)")
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                        help=f"delta of the (eps, delta) columns (default {DEFAULT_DELTA:g})")
    parser.add_argument("--own-noise-unknown", action="store_true",
                        help="observer knows only its own input, not its own noise (Muffliato Eq. 5)")
    parser.add_argument("--conversion", choices=("tight", "paper"), default="tight",
                        help="the paper columns' (eps, delta): tight (default: by the exact Gaussian profile of their "
                        "per-pair mu, the exact column's own conversion, so both compare on one basis), or paper "
                        "(the paper's own eps + ln(1/delta)/(alpha-1) at alpha, to reproduce published figures)")
    parser.add_argument("--attack-pairs", type=parse_attack_pairs, default="auto", metavar="auto|all|none|u:v,u:v",
                        help=f"pairs (source:observer) to attack; auto (default): all when n <= {AUTO_ATTACK_MAX_N}, "
                        "else none (none for structure-only logs, which hold no payload to score)")
    parser.add_argument("--attack-runs", type=int,
                        help=f"averaging protocols: replays of the transcript per hypothesis and pair (default "
                        f"{attack.DEFAULT_RUNS}); learning protocols: canaries per source node in the one-run canary "
                        f"audit (default {canary.DEFAULT_CANARIES})")
    parser.add_argument("--attack-seed", type=int, help="seed of the attack's simulated noise (reproducibility)")
    parser.add_argument("--with-private-logs", action="store_true",
                        help="test/experiment mode: also read private logs and check that the transcript "
                        "reproduces every logged payload")
    add_colluders_argument(parser)
    parser.add_argument("--data", type=Path,
                        help="test/experiment mode: the run's data folder, for the utility block. Learning runs "
                        "(test.npz and the nodes' files): test metric over steps against central and local-DP "
                        "baselines; with --with-private-logs, personalized CD's updates are recomputed from it (m_i). "
                        "Averaging runs (the nodes' input files): MSE of the final estimates against the mean of the "
                        "clipped inputs, beside Muffliato's bound (--with-private-logs gives the inputs too)")
    parser.set_defaults(handler=_run)


def parse_attack_pairs(text: str) -> AttackPairs:
    """'auto', 'all', 'none' or 'u:v,u:v' (ordered pairs source:observer)."""
    if text in ("auto", "all", "none"):
        return text
    try:
        pairs = tuple((int(u), int(v)) for u, v in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, all, none or u:v,u:v, got {text!r}") from None
    return pairs


def print_summary(report: Mapping[str, object], page: Path, console: Console) -> None:
    """The worst observers' mean losses, what the run shows in a sentence each, and the checks, in a few lines."""
    summary = report["summary"]
    if report["sigma"] == 0:
        console.print(NO_NOISE)
    else:
        console.print(_observer_table(report))
    if "collusion" in report:
        console.print(report["collusion"]["summary"]["sentence"], highlight=False)
    if summary["sampler"] and summary["sampler"]["simulation"]:
        console.print(f"[yellow]simulation sampler:[/] {summary['sampler']['note']}")
    sentences = [*summary_sentences(report),
                 *(stopped_sentence(node) for node in (report.get("faults") or {}).get("stopped", []))]
    for sentence in sentences:
        console.print(escape(sentence), highlight=False)
    for check in report["checks"]:
        console.print(f"{CHECK_MARKS[check['level']]} {escape(check['name'])}: {escape(check['detail'])}",
                      highlight=False)
    console.print(f"report: {page}")


def _observer_table(report: Mapping[str, object]) -> Table:
    rdp, eps = (report["summary"][f"mean_{unit}_per_observer"] for unit in ("rdp", "eps"))
    shown = worst_observers(report, SHOWN_OBSERVERS)
    table = Table(title=f"Mean loss per observer v {MEAN_RULE}: RDP at alpha = {report['alpha']:g}, "
                  f"ε at delta = {report['delta']:g} (worst {len(shown)} of {len(rdp['exact_upper'])})")
    for column in ("v", "exact RDP", "ε", "paper RDP", "ε", "LDP RDP", "ε", "exact/LDP"):
        table.add_column(column, justify="right")
    for v in shown:
        exact, ldp = rdp["exact_upper"][v], rdp["ldp"][v]
        ratio = exact / ldp if isinstance(exact, float) and isinstance(ldp, float) and ldp > 0 else None
        values = (exact, eps["exact_upper"][v], rdp["paper"][v], eps["paper"][v], ldp, eps["ldp"][v], ratio)
        table.add_row(str(v), *(format_number(x) for x in values))
    return table


def _run(args: argparse.Namespace) -> int:
    options = AuditOptions(
        alpha=args.alpha,
        delta=args.delta,
        observer_knows_own_noise=not args.own_noise_unknown,
        conversion=args.conversion,
        attack_pairs=args.attack_pairs,
        attack_runs=args.attack_runs,
        attack_seed=args.attack_seed,
        with_private_logs=args.with_private_logs,
        data=args.data,
        colluders=args.colluders,
    )
    if (args.out / REPORT_FILE).exists() and not args.force:
        raise ConfigError(f"{args.out} already holds a report ({REPORT_FILE}); pass --force to overwrite it")
    console = Console()
    with console.status(f"auditing {args.rundir}"):
        report = audit_run(args.rundir, args.out, options, csv=args.csv)
    print_summary(report, Path(args.out) / PAGE_FILE, console)
    return 0 if all(check["ok"] for check in report["checks"]) else 1
