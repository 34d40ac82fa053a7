"""Per-node data files: synthetic values for averaging, split into one file per node."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np

from node.data import NODE_FILE_PATTERN, save_vector
from node.errors import ConfigError
from node.topology import Topology

SEED_BITS = 31


def synthetic_values(n: int, dimension: int, sensitivity: float, seed: int | None = None) -> np.ndarray:
    """n vectors spread inside the ball of radius sensitivity/2 (so clipping never bites).

    Each node holds a shared signal plus its own deviation, like sensors measuring one
    quantity: the mean is informative and individual values differ.
    """
    rng = np.random.default_rng(seed)
    radius = sensitivity / 2.0
    signal = rng.uniform(-0.3, 0.3, size=dimension) * radius / np.sqrt(dimension)
    deviations = rng.normal(0.0, 0.3 * radius / np.sqrt(dimension), size=(n, dimension))
    values = signal + deviations
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    return np.where(norms > radius, values * (radius / norms), values)


def synthetic_categories(n: int, categories: int, seed: int | None = None) -> np.ndarray:
    """n categories in 0..L−1 (ring-histogram inputs), drawn from a skewed law (weights 1, 1/2, …, 1/L) so
    the histogram has a shape to find; as an (n, 1) array of one-value vectors."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, categories + 1)
    return rng.choice(categories, size=(n, 1), p=weights / weights.sum()).astype(float)


def synthetic_data(topology: Topology, seed: int | None = None) -> np.ndarray:
    """What `netdp data generate` writes for this topology, one row per node: categories for ring-histogram,
    else vectors of the published dimension inside the ball the sensitivity clips to."""
    params = topology.protocol
    if params.name == "ring-histogram":
        return synthetic_categories(topology.n, params.categories, seed)
    dimension, sensitivity = getattr(params, "dimension", None), getattr(params, "sensitivity", None)
    if dimension is None or sensitivity is None:
        raise ConfigError(f"protocol {params.name} publishes no vector dimension and sensitivity to generate data for")
    return synthetic_values(topology.n, dimension, sensitivity, seed)


def write_node_files(values: np.ndarray, out_dir: Path) -> list[Path]:
    """One JSON file per node: out_dir/node-<id>.json."""
    paths = [Path(out_dir) / f"{NODE_FILE_PATTERN.format(id=v)}.json" for v in range(len(values))]
    for path, value in zip(paths, values):
        save_vector(value, path)
    return paths


def chosen_seed(seed: int | None) -> int:
    """The seed a user gave (checked), or a fresh one to print: the data can always be made again."""
    if seed is not None and seed < 0:
        raise ConfigError(f"--seed must be 0 or more, not {seed}")
    return secrets.randbits(SEED_BITS) if seed is None else seed


def output_folder(out: Path, *, force: bool) -> Path:
    """A new or empty folder for data files, or one the user allowed us to write into (--force)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out} is not empty; pass --force to overwrite its data files")
    return out
