"""The per-pair results file: one row per ordered pair u -> v, columnar (Parquet), with a CSV export.

A report holds n(n - 1) pairs, too many for JSON objects at a few thousand nodes. The rows are
written straight from the accountants' [u, v] arrays, a block of whole sources at a time (one
row group each), so neither the Parquet file nor the CSV export ever holds a Python object per
pair, and memory stays bounded by the block. Readers get numpy columns back from `read_pairs`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

REPORT_FILE = "report.json"
PAIRS_FORMAT = "parquet"
# Rows per row group, in whole sources: what writing, and reading a row group, holds at once.
ROW_GROUP_ROWS = 1 << 18
# Up to this many nodes (65,280 pairs) the CSV export is written without being asked for.
CSV_AUTO_MAX_N = 256
PAIR_COLUMNS = (
    "source", "observer", "hop_distance",
    "paper_rdp", "paper_eps",
    "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper", "exact_rdp_lower", "exact_eps_lower",
    "exact_reconstructable", "exact_ill_conditioned",
    "empirical_eps_lower", "model_attack_eps_lower", "ldp_rdp", "ldp_eps", "paper_undercounts", "paper_corrected_rdp",
    "paper_corrected_eps", "paper_corrected_undercounts", "realized_path_rdp", "realized_path_eps", "ex_ante_rdp",
    "ex_ante_eps", "ex_ante_rdp_upper", "ex_ante_eps_upper",
    "linearized_rdp", "linearized_eps", "linearized_rdp_upper", "linearized_eps_upper",
)  # fmt: skip
INTEGER_COLUMNS = frozenset({"source", "observer", "hop_distance"})
BOOLEAN_COLUMNS = frozenset({"exact_reconstructable", "exact_ill_conditioned", "paper_undercounts",
                             "paper_corrected_undercounts"})


@dataclass(frozen=True)
class PairTable:
    """The pairs file's columns as n x n arrays [source u, observer v]; the diagonal is never written.

    `columns` excludes `source` and `observer` (the row's indices) and keeps file order. A None
    column has no value for this protocol (all null); NaN is null, and so is an infinite
    `hop_distance` (unreachable). Arrays may be views or broadcasts: writing copies one block of rows at a time.
    """

    n: int
    columns: Mapping[str, np.ndarray | None]

    @property
    def names(self) -> list[str]:
        return ["source", "observer", *self.columns]

    @property
    def rows(self) -> int:
        return self.n * (self.n - 1)

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(name, _arrow_type(name)) for name in self.names])

    def batches(self, rows: int = ROW_GROUP_ROWS) -> Iterator[pa.RecordBatch]:
        """The rows in source order (observer ascending), a block of whole sources per batch."""
        sources_per_batch = max(1, rows // max(self.n - 1, 1))
        for first in range(0, self.n, sources_per_batch):
            yield self._batch(first, min(self.n, first + sources_per_batch))

    def off_diagonal(self, name: str) -> np.ndarray:
        """Every pair's value of one column, in file order (for summaries over the pairs)."""
        matrix = self.columns[name]
        if matrix is None:
            return np.full(self.rows, np.nan)
        return np.asarray(matrix)[~np.eye(self.n, dtype=bool)]

    def _batch(self, first: int, stop: int) -> pa.RecordBatch:
        sources = np.arange(first, stop)
        observers = np.arange(self.n)
        keep = sources[:, None] != observers[None, :]
        size = int(np.count_nonzero(keep))
        arrays = [
            pa.array(np.broadcast_to(sources[:, None], keep.shape)[keep].astype(np.int32)),
            pa.array(np.broadcast_to(observers[None, :], keep.shape)[keep].astype(np.int32)),
        ]
        for name, matrix in self.columns.items():
            arrays.append(pa.nulls(size, _arrow_type(name)) if matrix is None
                          else _arrow_column(name, np.asarray(matrix)[first:stop][keep]))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema())


def write_pairs(table: PairTable, path: Path) -> Path:
    """Write the Parquet pairs file, one row group per block of sources; return its path."""
    with pq.ParquetWriter(path, table.schema(), compression="zstd") as writer:
        for batch in table.batches():
            writer.write_batch(batch, row_group_size=ROW_GROUP_ROWS)
    return path


def write_pairs_csv(table: PairTable, path: Path) -> Path:
    """The same rows as CSV, block by block: empty where null, `inf` for an infinite loss, `true`/`false`."""
    options = pa_csv.WriteOptions(quoting_style="none", quoting_header="none")
    with pa_csv.CSVWriter(path, table.schema(), write_options=options) as writer:
        for batch in table.batches():
            writer.write_batch(batch)
    return path


def wants_csv(n: int, asked: bool) -> bool:
    """Whether a report of n nodes gets the CSV export: when asked, or when the run is small."""
    return asked or n <= CSV_AUTO_MAX_N


def pairs_path(source: Path) -> Path:
    """The pairs file behind `source`: the file itself, a report document (its `pairs_file.file`), or a folder
    holding report.json."""
    source = Path(source)
    if source.is_dir():
        source = source / REPORT_FILE
    if source.suffix != ".json":
        return source
    pointer = json.loads(source.read_text(encoding="utf-8"))["pairs_file"]
    return source.parent / pointer["file"]


def read_pairs(source: Path, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Columns of a pairs file (all by default) as numpy arrays, one entry per ordered pair.

    Null becomes NaN in number columns (`hop_distance` comes back as float for that reason);
    `source` and `observer` are int64, the flags bool.
    """
    table = pq.read_table(pairs_path(source), columns=None if columns is None else list(columns))
    return {name: _numpy(table.column(name)) for name in table.column_names}


def pair_matrix(pairs: Mapping[str, np.ndarray], column: str, n: int) -> np.ndarray:
    """One column of `read_pairs` as an n x n matrix [u, v], NaN on the diagonal and where null."""
    matrix = np.full((n, n), np.nan)
    matrix[pairs["source"], pairs["observer"]] = pairs[column]
    return matrix


def _arrow_type(name: str) -> pa.DataType:
    if name in INTEGER_COLUMNS:
        return pa.int32()
    return pa.bool_() if name in BOOLEAN_COLUMNS else pa.float64()


def _arrow_column(name: str, values: np.ndarray) -> pa.Array:
    if name in BOOLEAN_COLUMNS:
        return pa.array(values.astype(bool))
    values = values.astype(np.float64, copy=False)
    if name in INTEGER_COLUMNS:
        finite = np.isfinite(values)
        return pa.array(np.where(finite, values, 0).astype(np.int32), mask=~finite)
    return pa.array(values, mask=np.isnan(values))


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_boolean(column.type):
        return column.to_numpy()
    if pa.types.is_integer(column.type) and column.null_count == 0:
        return column.to_numpy().astype(np.int64)
    return column.cast(pa.float64()).fill_null(np.nan).to_numpy()
