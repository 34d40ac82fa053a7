"""A node's private data: one vector (averaging) or a local training set (learning), from a local file."""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import numpy as np

from node.errors import ConfigError
from node.tasks.registry import TaskName, task_spec

SUPPORTED_SUFFIXES = (".json", ".npy", ".npz", ".csv", ".txt")
NODE_FILE_PATTERN = "node-{id}"  # a data folder holds one file per node id, named by this pattern


def node_data_file(data_dir: Path, node_id: int) -> Path:
    """The data file of one node in a data folder, whatever its supported format."""
    stem = NODE_FILE_PATTERN.format(id=node_id)
    for suffix in SUPPORTED_SUFFIXES:
        candidate = Path(data_dir) / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{data_dir}: no data file for node {node_id} (expected {stem}.json, .npy, .npz or .csv)")


def load_vector(path: Path, dimension: int) -> np.ndarray:
    """Read a float vector of length `dimension` from JSON, NPY, NPZ (first array) or CSV."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: data file not found")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            raw = json.loads(path.read_text(encoding="utf-8"))
            raw = raw["value"] if isinstance(raw, dict) and "value" in raw else raw
            array = np.asarray(raw, dtype=np.float64)
        elif suffix == ".npy":
            array = np.load(path, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                array = archive[archive.files[0]]
        elif suffix in (".csv", ".txt"):
            array = np.loadtxt(path, delimiter="," if suffix == ".csv" else None, dtype=np.float64, ndmin=1)
        else:
            raise ConfigError(f"{path}: unsupported data format (use one of {', '.join(SUPPORTED_SUFFIXES)})")
    except (ValueError, KeyError, IndexError, OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read a numeric vector ({exc})") from None
    array = np.asarray(array, dtype=np.float64).ravel()
    if array.size != dimension:
        raise ConfigError(f"{path}: holds {array.size} values, the topology's dimension is {dimension}")
    if not np.isfinite(array).all():
        raise ConfigError(f"{path}: holds NaN or infinite values")
    return array


def load_learning_data(path: Path, dimension: int, *, task: TaskName | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A training or test set from NPZ: `x` (m × D features) and `y` (m labels ±1 or targets), checked.

    Any unreadable or malformed file is a one-line ConfigError, so a node refuses it instead of
    crashing; with a `task`, the labels must be what it expects (−1 or +1 for a classification task).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: data file not found")
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ConfigError(f"{path}: holds a single array, not an NPZ archive of x and y")
        with archive:
            missing = [name for name in ("x", "y") if name not in archive.files]
            if missing:
                raise ConfigError(f"{path}: no array {missing[0]!r} (a learning file holds x and y)")
            x, y = _real_array(archive, "x", path), _real_array(archive, "y", path)
    except _UNREADABLE as exc:
        raise ConfigError(f"{path}: cannot read a learning set ({exc})") from None
    if x.ndim != 2 or x.shape[1] != dimension:
        raise ConfigError(f"{path}: features of shape {x.shape}, the topology's dimension is {dimension}")
    if y.shape != (x.shape[0],) or x.shape[0] == 0:
        raise ConfigError(f"{path}: {x.shape[0]} examples and {y.size} labels; need as many, at least one")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ConfigError(f"{path}: holds NaN or infinite values")
    problem = None if task is None else task_spec(task).label_problem(y)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    return x, y


# What np.load and reading an archive member raise on a truncated, corrupt or foreign file.
_UNREADABLE = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)


def _real_array(archive: np.lib.npyio.NpzFile, name: str, path: Path) -> np.ndarray:
    """One archive member as float64; strings, objects or complex numbers are refused, not cast."""
    array = archive[name]
    if array.dtype.kind not in "biuf":
        raise ConfigError(f"{path}: array {name!r} holds {array.dtype} values, not real numbers")
    return np.asarray(array, dtype=np.float64)


def clip_to_ball(value: np.ndarray, radius: float) -> tuple[np.ndarray, bool]:
    """Project onto the l2 ball of `radius`, so any two inputs differ by at most 2 * radius."""
    norm = float(np.linalg.norm(value))
    if norm <= radius:
        return value, False
    return value * (radius / norm), True


def save_vector(value: np.ndarray, path: Path) -> None:
    """Write a vector as JSON (what `netdp` data generators produce)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"value": [float(x) for x in np.ravel(value)]}) + "\n", encoding="utf-8")
