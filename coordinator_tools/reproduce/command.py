"""`netdp reproduce NAME` / `--all`: run the papers' figures into folders and print them beside the papers.

A reproduction's folder holds result.json (the setup, seeds, deviations from the paper, theorems
whose statement and proof disagree, and every row: quantity, published, measured, unit, ratio,
agrees, verdict with its evidence, note), table.csv (the same rows), one PNG per figure, and the
runs and audits the reproduction made. `--all` runs every reproduction into one folder each and
writes summary.json and index.html (`page.py`) over them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import secrets
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from coordinator_tools.arguments import positive  # noqa: E402
from coordinator_tools.reproduce import page  # noqa: E402
from coordinator_tools.reproduce.outcome import Context, Outcome, Reproduction  # noqa: E402
from coordinator_tools.reproduce.publish import DEFAULT_BUDGET_MB, publish  # noqa: E402
from coordinator_tools.reproduce.registry import reproductions  # noqa: E402
from coordinator_tools.reproduce.result import (  # noqa: E402
    SCHEMA,
    DeviationEntry,
    ReproductionResult,
    ResultRow,
    StatementVsProofEntry,
)
from node.errors import ConfigError  # noqa: E402

CONSOLE = Console()
RESULT_FILE = "result.json"
TABLE_FILE = "table.csv"
SUMMARY_FILE = page.SUMMARY_FILE
INVOCATION_FILE = "reproduce.json"  # name, scale and seed, written first: what --resume must match
ROW_FIELDS = tuple(ResultRow.model_fields)  # table.csv's columns
FIGURE_DPI = 120


def reproduce(reproduction: Reproduction, out: Path, scale: str, seed: int, resume: bool = False) -> dict[str, object]:
    """Run `reproduction` into the new or empty folder `out`; write and return its result document.

    With `resume`, `out` may hold an interrupted run of the same reproduction, scale and seed: its finished audits are
    read back (`runs.audited_run`), the rest is run.
    """
    out = Path(out)
    invocation = {"name": reproduction.name, "scale": scale, "seed": seed}
    if out.exists() and any(out.iterdir()):
        if not resume:
            raise ConfigError(f"{out} is not empty: give a new folder with --out (or --resume an interrupted one)")
        recorded = _invocation(out)
        if recorded != invocation:
            raise ConfigError(f"{out} holds {recorded}, not {invocation}: resume with the same name, scale and seed")
    out.mkdir(parents=True, exist_ok=True)
    (out / INVOCATION_FILE).write_text(json.dumps(invocation) + "\n", encoding="utf-8")
    started = time.monotonic()
    outcome = reproduction.run(Context(folder=out, scale=scale, seed=seed))
    figures = _write_figures(outcome, out)
    result = ReproductionResult(
        schema=SCHEMA, name=reproduction.name, paper=reproduction.paper, figure=reproduction.figure,
        claim=reproduction.claim, scale=scale, seed=seed, seeds=dict(outcome.seeds), setup=dict(outcome.setup),
        summary=outcome.summary, verdict=outcome.verdict,
        deviations=[DeviationEntry.model_validate(deviation) for deviation in outcome.deviations],
        statement_vs_proof=[StatementVsProofEntry.model_validate(entry) for entry in outcome.statement_vs_proof],
        rows=[ResultRow.judged(row) for row in outcome.rows], figures=figures,
        runs=[str(path) for path in outcome.runs], elapsed_s=round(time.monotonic() - started, 3),
    )
    document = result.document()
    (out / RESULT_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with (out / TABLE_FILE).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(document["rows"])
    return document


def _invocation(out: Path) -> dict[str, object] | None:
    """The name, scale and seed a reproduction folder was started with (None: not a reproduction's folder)."""
    path = out / INVOCATION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def resumed_seed(out: Path | None, name: str, seed: int | None) -> int | None:
    """The seed an interrupted reproduction folder was started with, when --seed does not give one."""
    recorded = None if out is None else _invocation(Path(out) / name if name else Path(out))
    return seed if seed is not None or recorded is None else int(recorded["seed"])


def reproduce_all(known: dict[str, Reproduction], out: Path, scale: str, seed: int,
                  resume: bool = False) -> list[ReproductionResult]:
    """Run every reproduction into out/NAME (one base seed for all), then write out/summary.json and out/index.html.

    The summary is what a referee reads first: each reproduction's verdict, deviations and findings,
    stamped with the commit and the machine that ran them. With `resume`, a finished reproduction's
    result.json is read back and an interrupted one resumed.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not resume:
        raise ConfigError(f"{out} is not empty: give a new folder with --out (or --resume an interrupted one)")
    documents = []
    for name, reproduction in known.items():
        finished = out / name / RESULT_FILE
        if resume and finished.exists() and _invocation(out / name) == {"name": name, "scale": scale, "seed": seed}:
            documents.append(ReproductionResult.read(finished))
            CONSOLE.print(f"[bold]{name}[/bold]: finished before, {documents[-1].verdict}")
            continue
        CONSOLE.print(f"[bold]{name}[/bold] ({scale} scale) ...")
        documents.append(ReproductionResult.model_validate(reproduce(reproduction, out / name, scale, seed,
                                                                    resume=resume)))
        CONSOLE.print(f"  {documents[-1].verdict} in {documents[-1].elapsed_s:.0f} s")
    summary = {"schema": "netdp.reproduce-summary/1", "scale": scale, "seed": seed, "stamp": _stamp(),
               "reproductions": [page.summary_entry(document, scale, seed, out / document.name)
                                 for document in documents]}
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / page.PAGE_FILE).write_text(page.render(summary, documents), encoding="utf-8")
    return documents


def _stamp() -> dict[str, object]:
    """The commit and the machine a summary was made on (the page's full-scale version is cited with both), and
    whether tracked files differed from that commit (then the commit alone does not name the code that ran)."""
    try:
        commit = _git("rev-parse", "HEAD")
        modified: bool | None = bool(_git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        commit, modified = "unknown", None
    return {"commit": commit, "uncommitted_changes": modified, "machine": platform.node(),
            "platform": platform.platform(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent).stdout.strip()


def _write_figures(outcome: Outcome, out: Path) -> list[str]:
    names = []
    for stem, figure in outcome.figures.items():
        name = f"{stem}.png"
        figure.savefig(out / name, dpi=FIGURE_DPI, bbox_inches="tight")
        names.append(name)
    return names


def print_result(document: ReproductionResult, out: Path, console: Console = CONSOLE) -> None:
    """The rows as one table, published beside measured, then the summary and where the files are."""
    table = Table(title=f"{document.paper} {document.figure} ({document.scale} scale): {document.claim}")
    for column, justify in (("quantity", "left"), ("published", "right"), ("measured", "right"),
                            ("ratio", "right"), ("agrees", "center"), ("verdict", "left"),
                            ("note", "left")):
        table.add_column(column, justify=justify)
    for row in document.rows:
        table.add_row(row.quantity + (f" [{row.unit}]" if row.unit else ""),
                      "-" if row.published is None else f"{row.published:.4g}", f"{row.measured:.4g}",
                      "-" if row.ratio is None else f"{row.ratio:.3g}",
                      {True: "yes", False: "NO", None: "-"}[row.agrees], row.verdict or "-", row.note)
    console.print(table)
    if document.summary:
        console.print(document.summary)
    console.print(f"verdict: {document.verdict}")
    for deviation in document.deviations:
        console.print(f"  deviation ({deviation.aspect}): paper {deviation.paper}; netdp {deviation.netdp}")
    console.print(f"written: {out / RESULT_FILE}, {out / TABLE_FILE}"
                  + "".join(f", {out / name}" for name in document.figures))


def _publish_command(args: argparse.Namespace) -> int:
    """`--publish DIR --to DEST`: the page over `--all` copied into the docs tree (`publish.py`)."""
    if args.to is None:
        raise ConfigError("argument --publish: give --to DEST, the folder the page is published in")
    if args.name is not None or args.all or args.resume:
        raise ConfigError("argument --publish: give it alone with --to (and --max-mb), not with NAME, --all or "
                          "--resume")
    publication = publish(args.publish, args.to, args.max_mb)
    CONSOLE.print(f"published {len(publication.files)} files ({publication.size / 1e6:.2f} MB of "
                  f"{publication.budget / 1e6:g}) into {args.to}: {len(publication.audits)} of "
                  f"{len(publication.audits) + len(publication.audits_left_out)} audit pages, "
                  f"{len(publication.scaled)} figures scaled down", highlight=False)
    return 0


def _reproduce_command(args: argparse.Namespace) -> int:
    if args.publish is not None:
        return _publish_command(args)
    if args.to is not None:
        raise ConfigError("argument --to: goes with --publish DIR")
    known = reproductions()
    if args.all:
        if args.name is not None:
            raise ConfigError("give either NAME or --all, not both")
        out = args.out or Path("reproduce") / f"all-{args.scale}-{time.strftime('%Y%m%d-%H%M%S')}"
        seed = resumed_seed(out, next(iter(known)), args.seed) if args.resume else args.seed
        seed = seed if seed is not None else secrets.randbits(32)
        reproduce_all(known, out, args.scale, seed, resume=args.resume)
        CONSOLE.print(f"written: {out / SUMMARY_FILE}, {out / page.PAGE_FILE}")
        return 0
    if args.list or args.name is None:
        for reproduction in known.values():
            CONSOLE.print(f"[bold]{reproduction.name}[/bold]: {reproduction.paper} {reproduction.figure}: "
                          f"{reproduction.claim}\n  full: {reproduction.full_scale}"
                          f"\n  quick: {reproduction.quick_scale}")
        return 0
    if args.name not in known:
        raise ConfigError(f"no reproduction named {args.name!r}; known: {', '.join(known)}")
    out = args.out or Path("reproduce") / f"{args.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    seed = resumed_seed(out, "", args.seed) if args.resume else args.seed
    seed = seed if seed is not None else secrets.randbits(32)
    document = reproduce(known[args.name], out, args.scale, seed, resume=args.resume)
    print_result(ReproductionResult.model_validate(document), out)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce", help="rerun a paper's headline figure and show it beside the published values",
        description="Run the runs and audits behind one of the papers' headline figures and write the figure, "
        "the published values and netdp's measured values side by side (result.json, table.csv, PNGs). "
        "`netdp reproduce --list` names them.")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the figure to reproduce (see --list)")
    parser.add_argument("--list", action="store_true", help="list the reproductions and what each runs")
    parser.add_argument("--all", action="store_true",
                        help="run every reproduction into --out/NAME and write summary.json and index.html over them")
    parser.add_argument("--out", type=Path, default=None,
                        help="new folder (default reproduce/NAME-<time>, with --all reproduce/all-SCALE-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted reproduction in --out (same NAME or --all, scale and seed; the "
                             "seed is read from the folder when --seed is not given): finished audits are kept")
    parser.add_argument("--scale", choices=("full", "quick"), default="full",
                        help="full: the paper's sizes; quick: a small graph in seconds to minutes (default full)")
    parser.add_argument("--seed", type=int, default=None,
                        help="base seed of the data and the simulation noise (default: a fresh one, recorded)")
    parser.add_argument("--publish", type=Path, default=None, metavar="DIR",
                        help="copy the page an --all run wrote in DIR (index.html, summary.json, figures, tables and "
                             "as many audit pages as --max-mb allows) into --to, its links rewritten to work there")
    parser.add_argument("--to", type=Path, default=None, metavar="DEST",
                        help="with --publish: a new or empty folder, or an earlier publication (replaced), e.g. "
                             "docs/reproductions/published")
    parser.add_argument("--max-mb", type=positive, default=DEFAULT_BUDGET_MB,
                        help=f"with --publish: the published copy's size budget in megabytes (default "
                             f"{DEFAULT_BUDGET_MB:g})")
    parser.set_defaults(handler=_reproduce_command)
