"""What a sweep folder holds, and which of its points are finished.

DIR/sweep.json holds the grid as given and every point with its parameters, seeds and status
(`done`, `pending`, or `failed` with the error); it is rewritten after every point. A point is
finished when its row file points/<id>/row.json exists: that file is written last, through a
temporary file renamed into place, so an interrupted point never looks finished, and a point
folder without it is cleared and run again. sweep.csv is assembled from the row files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from coordinator_tools.sweep.grid import Point, SweepGrid
from coordinator_tools.sweep.rows import SweepDocument, SweepPointEntry, SweepRow
from node.errors import ConfigError

SWEEP_FILE = "sweep.json"
CSV_FILE = "sweep.csv"
ROW_FILE = "row.json"
POINTS_DIR = "points"


def point_folder(out: Path, point_id: str) -> Path:
    return Path(out) / POINTS_DIR / point_id


def read_row(out: Path, point_id: str) -> SweepRow | None:
    """The finished point's row, or None when the point has not finished."""
    path = point_folder(out, point_id) / ROW_FILE
    return SweepRow.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_row(out: Path, point_id: str, row: SweepRow | Mapping[str, object]) -> Path:
    """Mark the point finished: its row file (checked against `SweepRow`), atomically."""
    text = json.dumps(SweepRow.model_validate(row).model_dump(), indent=2) + "\n"
    return write_atomically(point_folder(out, point_id) / ROW_FILE, text)


def clear_point(out: Path, point_id: str) -> None:
    """Remove what an unfinished point left, so that it runs again from an empty folder."""
    shutil.rmtree(point_folder(out, point_id), ignore_errors=True)


def write_atomically(path: Path, text: str) -> Path:
    """Write `text` to `path` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "w", encoding="utf-8") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(partial, path)
    return path


def check_folder(out: Path, grid: SweepGrid) -> None:
    """Refuse an --out folder that holds something else than a sweep of this same grid."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file, not a folder")
    sweep_file = out / SWEEP_FILE
    if not sweep_file.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise ConfigError(f"{out} is not empty and holds no {SWEEP_FILE}; choose a new --out folder")
        return
    try:
        stored = json.loads(sweep_file.read_text(encoding="utf-8"))["grid"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ConfigError(f"{sweep_file} is not a sweep file; choose a new --out folder") from None
    given = grid.model_dump(mode="json")
    differing = sorted(key for key in {*stored, *given} if stored.get(key) != given.get(key))
    if differing:
        raise ConfigError(f"{out} holds a sweep of another grid (it differs in {', '.join(differing)}); rerun it with "
                          f"the same options, or choose a new --out folder")


def write_sweep(out: Path, grid: SweepGrid, points: Sequence[Point], failures: Mapping[str, str]) -> Path:
    """sweep.json: the grid, and every point with its parameters, seeds and status."""
    entries = []
    for point in points:
        done = (point_folder(out, point.id) / ROW_FILE).is_file()
        status = "done" if done else "failed" if point.id in failures else "pending"
        entries.append(SweepPointEntry(**point.to_json(), folder=str(Path(POINTS_DIR) / point.id), status=status,
                                       error=failures[point.id] if status == "failed" else None))
    document = SweepDocument(grid=grid, points=entries).model_dump(mode="json", by_alias=True)
    return write_atomically(Path(out) / SWEEP_FILE, json.dumps(document, indent=2) + "\n")


def write_csv(out: Path, rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> Path:
    """sweep.csv: one row per finished point; an empty cell is no value, flags are true/false."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: _cell(row.get(column)) for column in columns})
    return write_atomically(Path(out) / CSV_FILE, text.getvalue())


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value
