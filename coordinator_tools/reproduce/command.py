"""`netdp reproduce NAME`: run one paper figure's reproduction into a folder and print it beside the paper.

The folder holds result.json (the setup, seeds, and every row: quantity, published, measured,
unit, ratio, agrees, note), table.csv (the same rows), one PNG per figure, and the runs and
audits the reproduction made.
"""

from __future__ import annotations

import argparse
import csv
import json
import secrets
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from coordinator_tools.reproduce.outcome import Context, Outcome, Reproduction, Row  # noqa: E402
from coordinator_tools.reproduce.registry import reproductions  # noqa: E402
from node.errors import ConfigError  # noqa: E402

CONSOLE = Console()
RESULT_FILE = "result.json"
TABLE_FILE = "table.csv"
ROW_FIELDS = ("quantity", "published", "measured", "unit", "ratio", "agrees", "rtol", "note")
FIGURE_DPI = 120


def reproduce(reproduction: Reproduction, out: Path, scale: str, seed: int) -> dict[str, object]:
    """Run `reproduction` into the new or empty folder `out`; write and return its result document."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: give a new folder with --out")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    outcome = reproduction.run(Context(folder=out, scale=scale, seed=seed))
    figures = _write_figures(outcome, out)
    document = {
        "schema": "netdp.reproduce/1",
        "name": reproduction.name,
        "paper": reproduction.paper,
        "figure": reproduction.figure,
        "claim": reproduction.claim,
        "scale": scale,
        "seed": seed,
        "seeds": dict(outcome.seeds),
        "setup": dict(outcome.setup),
        "summary": outcome.summary,
        "rows": [_row_document(row) for row in outcome.rows],
        "figures": figures,
        "runs": [str(path) for path in outcome.runs],
        "elapsed_s": round(time.monotonic() - started, 3),
    }
    (out / RESULT_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with (out / TABLE_FILE).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(document["rows"])
    return document


def _row_document(row: Row) -> dict[str, object]:
    return {"quantity": row.quantity, "published": row.published, "measured": row.measured, "unit": row.unit,
            "ratio": row.ratio, "agrees": row.agrees, "rtol": row.rtol, "note": row.note}


def _write_figures(outcome: Outcome, out: Path) -> list[str]:
    names = []
    for stem, figure in outcome.figures.items():
        name = f"{stem}.png"
        figure.savefig(out / name, dpi=FIGURE_DPI, bbox_inches="tight")
        names.append(name)
    return names


def print_result(document: dict[str, object], out: Path, console: Console = CONSOLE) -> None:
    """The rows as one table, published beside measured, then the summary and where the files are."""
    table = Table(title=f"{document['paper']} {document['figure']} ({document['scale']} scale): {document['claim']}")
    for column, justify in (("quantity", "left"), ("published", "right"), ("measured", "right"),
                            ("ratio", "right"), ("agrees", "center"), ("note", "left")):
        table.add_column(column, justify=justify)
    for row in document["rows"]:
        table.add_row(f"{row['quantity']}" + (f" [{row['unit']}]" if row["unit"] else ""),
                      "-" if row["published"] is None else f"{row['published']:.4g}", f"{row['measured']:.4g}",
                      "-" if row["ratio"] is None else f"{row['ratio']:.3g}",
                      {True: "yes", False: "NO", None: "-"}[row["agrees"]], row["note"])
    console.print(table)
    if document["summary"]:
        console.print(document["summary"])
    console.print(f"written: {out / RESULT_FILE}, {out / TABLE_FILE}"
                  + "".join(f", {out / name}" for name in document["figures"]))


def _reproduce_command(args: argparse.Namespace) -> int:
    known = reproductions()
    if args.list or args.name is None:
        for reproduction in known.values():
            CONSOLE.print(f"[bold]{reproduction.name}[/bold]: {reproduction.paper} {reproduction.figure}: "
                          f"{reproduction.claim}\n  full: {reproduction.full_scale}"
                          f"\n  quick: {reproduction.quick_scale}")
        return 0
    if args.name not in known:
        raise ConfigError(f"no reproduction named {args.name!r}; known: {', '.join(known)}")
    out = args.out or Path("reproduce") / f"{args.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    document = reproduce(known[args.name], out, args.scale, seed)
    print_result(document, out)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce", help="rerun a paper's headline figure and show it beside the published values",
        description="Run the runs and audits behind one of the papers' headline figures and write the figure, "
        "the published values and netdp's measured values side by side (result.json, table.csv, PNGs). "
        "`netdp reproduce --list` names them.")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the figure to reproduce (see --list)")
    parser.add_argument("--list", action="store_true", help="list the reproductions and what each runs")
    parser.add_argument("--out", type=Path, default=None, help="new folder (default reproduce/NAME-<time>)")
    parser.add_argument("--scale", choices=("full", "quick"), default="full",
                        help="full: the paper's sizes; quick: a small graph in seconds to minutes (default full)")
    parser.add_argument("--seed", type=int, default=None,
                        help="base seed of the data and the simulation noise (default: a fresh one, recorded)")
    parser.set_defaults(handler=_reproduce_command)
