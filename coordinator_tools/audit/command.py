"""`netdp audit RUNDIR --out DIR`: the command line of `run_audit.audit_run`.

`register` adds the sub-command, which runs the audit, prints a short summary (`print_summary`,
also used by `netdp demo`) and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coordinator_tools.arguments import probability, renyi_order
from coordinator_tools.audit import attack, canary
from coordinator_tools.audit.collusion import add_colluders_argument, threat_model_argument
from coordinator_tools.audit.faults import stopped_sentence
from coordinator_tools.audit.html import PAGE_FILE
from coordinator_tools.audit.pairs_file import CSV_AUTO_MAX_N
from coordinator_tools.audit.report import MEAN_RULE, REPORT_FILE, Report, format_number, worst_observers
from coordinator_tools.audit.report_schema import AuditReport
from coordinator_tools.audit.run_audit import (
    AUTO_ATTACK_MAX_N,
    DEFAULT_DELTA,
    AttackPairs,
    AuditOptions,
    audit_report,
)
from coordinator_tools.audit.sentences import NO_NOISE, summary_sentences
from node.errors import ConfigError

SHOWN_OBSERVERS = 10
CHECK_MARKS = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "warning": "[yellow]⚠ warning[/]"}


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
    parser.add_argument("--alpha", type=renyi_order, help="Renyi order of the report (default: the topology's)")
    parser.add_argument("--delta", type=probability, default=DEFAULT_DELTA,
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
    threat_model_argument(parser)
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


def print_summary(report: Report, page: Path, console: Console) -> None:
    """The worst observers' mean losses, what the run shows in a sentence each, and the checks, in a few lines."""
    model, summary = report.model, report.model.summary
    if model.sigma == 0:
        console.print(NO_NOISE)
    else:
        console.print(_observer_table(model))
    if model.collusion is not None:
        console.print(report.document["collusion"]["summary"]["sentence"], highlight=False)
    if summary.sampler is not None and summary.sampler.simulation:
        console.print(f"[yellow]simulation sampler:[/] {summary.sampler.note}")
    sentences = [*summary_sentences(report.document),
                 *(stopped_sentence(node) for node in (model.faults or {}).get("stopped", []))]
    for sentence in sentences:
        console.print(escape(sentence), highlight=False)
    for check in model.checks:
        console.print(f"{CHECK_MARKS[check.level]} {escape(check.name)}: {escape(check.detail)}", highlight=False)
    console.print(f"report: {page}")


def _observer_table(report: AuditReport) -> Table:
    rdp, eps = report.summary.mean_rdp_per_observer, report.summary.mean_eps_per_observer
    shown = worst_observers(report, SHOWN_OBSERVERS)
    table = Table(title=f"Mean loss per observer v {MEAN_RULE}: RDP at alpha = {report.alpha:g}, "
                  f"ε at delta = {report.delta:g} (worst {len(shown)} of {len(rdp['exact_upper'])})")
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
        eavesdropper=args.threat_model == "eavesdropper",
    )
    if (args.out / REPORT_FILE).exists() and not args.force:
        raise ConfigError(f"{args.out} already holds a report ({REPORT_FILE}); pass --force to overwrite it")
    console = Console()
    with console.status(f"auditing {args.rundir}"):
        report = audit_report(args.rundir, args.out, options, csv=args.csv)
    print_summary(report, Path(args.out) / PAGE_FILE, console)
    return 0 if all(check.ok for check in report.model.checks) else 1
