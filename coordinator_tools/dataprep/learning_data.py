"""`netdp data split`: a learning dataset prepared as the papers do, split into per-node training files.

Sources: two synthetic problems with a hidden unit-norm w* ("separable" classification, noisy
linear "regression"), scikit-learn's bundled breast_cancer, diabetes and digits sets (they ship
inside the package: no download), and a user's own file as "csv:PATH" (the Muffliato paper's
binarised UCI Houses, OpenML 823, needs a download, so it is read from a local copy).
A registered learning task (node.tasks, a plug-in included) may bring datasets of its own by name.

Preparation follows Muffliato Sec. 6: a seeded 80/20 train/test split, features standardised with
the training set's mean and deviation only (the test set stays unseen), then every row scaled to
unit L2 norm so the logistic loss is 1-Lipschitz. No constant bias feature is appended: the papers
learn θ ∈ R^d on x alone. Classification labels are −1/+1; regression targets are standardised
with the training statistics. The training set is then partitioned across the topology's nodes.

Files in the output folder: node-<id>.npz (x, y: that node's training share, private), test.npz
(x, y: the held-out 20%, public to the auditor for utility) and dataset.json (DatasetInfo).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import re
from pathlib import Path
from typing import Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn import datasets as sklearn_datasets

from coordinator_tools.dataprep.datasets import NODE_FILE_PATTERN, chosen_seed, output_folder
from node.data import SUPPORTED_SUFFIXES, load_learning_data
from node.errors import ConfigError
from node.schema import load_model, save_model
from node.tasks.base import LabelKind
from node.tasks.registry import TaskName as Loss
from node.tasks.registry import task_datasets, task_spec
from node.topology import Topology, load_topology

LearningTask = LabelKind
Partition = Literal["iid", "label-skew"]

TEST_FILE = "test.npz"
INFO_FILE = "dataset.json"
FEATURES = "standardised, unit-norm rows"
TEST_FRACTION = 0.2
CSV_PREFIX = "csv:"
SYNTHETIC = ("separable", "regression")
BUNDLED = ("breast_cancer", "diabetes", "digits")
DEFAULT_SIZE = 1000
DEFAULT_LABEL_NOISE = 0.0
DEFAULT_NOISE_STD = 0.1
DEFAULT_SKEW = 0.5
REGRESSION_SKEW_BINS = 10
IPF_ITERATIONS = 10_000
LOSS_OF_TASK: dict[LearningTask, Loss] = {"classification": "logistic", "regression": "least_squares"}


class DatasetInfo(BaseModel):
    """dataset.json: what was split and how, so a run's auditor can read the test set back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str = Field(min_length=1, description="the DATASET argument, e.g. 'digits' or 'csv:houses.csv'")
    task: LearningTask
    dimension: int = Field(ge=1, description="features per example (the model's length)")
    n_nodes: int = Field(ge=1)
    partition: Partition
    skew: float | None = Field(None, gt=0.0, description="Dirichlet concentration of a label-skew partition")
    seed: int = Field(ge=0)
    train_sizes: dict[int, int] = Field(description="training examples of each node id")
    test_size: int = Field(ge=1)
    features: Literal["standardised, unit-norm rows"] = FEATURES

    @model_validator(mode="after")
    def _consistent(self) -> DatasetInfo:
        if sorted(self.train_sizes) != list(range(self.n_nodes)):
            raise ValueError(f"train_sizes must name the node ids 0..{self.n_nodes - 1}")
        if min(self.train_sizes.values()) < 1:
            raise ValueError("every node needs at least one training example")
        if (self.skew is None) != (self.partition == "iid"):
            raise ValueError("skew is given for a label-skew partition, and only then")
        return self

    @property
    def loss(self) -> Loss:
        """netdp's own loss for these labels: the `--task` a topology for this split is made with, unless a
        plug-in task with the same kind of labels is."""
        return LOSS_OF_TASK[self.task]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A learning problem as loaded: raw features, labels ±1 or raw targets, and how labels were made."""

    x: np.ndarray
    y: np.ndarray
    task: LearningTask
    labels: str = ""


@dataclasses.dataclass(frozen=True)
class Examples:
    """Prepared examples: unit-norm feature rows and labels ±1 or standardised targets."""

    x: np.ndarray
    y: np.ndarray


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """Options that only some sources take; None means the source's default (or not given)."""

    size: int | None = None
    dimension: int | None = None
    label_noise: float | None = None
    noise_std: float | None = None
    target: str | None = None
    task: LearningTask | None = None


# ---------------------------------------------------------------------------------------------
# Sources


def separable(size: int, dimension: int, rng: np.random.Generator, label_noise: float = DEFAULT_LABEL_NOISE
              ) -> Dataset:
    """Points on the unit sphere labelled by the side of a hidden unit-norm separator w*.

    The sphere (not a Gaussian cloud) keeps the preparation, which re-normalises rows, from
    bending the hidden relation; each label is then flipped with probability label_noise
    (the AISTATS 2018 synthetic task uses 0.05).
    """
    separator = _unit_rows(rng.normal(size=(1, dimension)))[0]
    x = _unit_rows(rng.normal(size=(size, dimension)))
    y = np.where(x @ separator >= 0.0, 1.0, -1.0)
    return Dataset(x, np.where(rng.random(size) < label_noise, -y, y), "classification",
                   "sign of <w*, x> for a hidden unit-norm w*")


def noisy_regression(size: int, dimension: int, rng: np.random.Generator, noise_std: float = DEFAULT_NOISE_STD
                     ) -> Dataset:
    """y = <w*, x> + N(0, noise_std²) for a hidden unit-norm w* and x on the unit sphere."""
    weights = _unit_rows(rng.normal(size=(1, dimension)))[0]
    x = _unit_rows(rng.normal(size=(size, dimension)))
    return Dataset(x, x @ weights + rng.normal(0.0, noise_std, size), "regression")


def bundled(name: str) -> Dataset:
    """A dataset shipped inside scikit-learn, as a binary task where it is a classification one.

    breast_cancer: benign → +1, malignant → −1. digits (10 classes): 5–9 → +1, 0–4 → −1, a
    nearly balanced binary task on all 1797 images. diabetes: regression on its progression score.
    """
    if name == "breast_cancer":
        raw = sklearn_datasets.load_breast_cancer()
        return Dataset(raw.data, np.where(raw.target == 1, 1.0, -1.0), "classification",
                       "benign -> +1, malignant -> -1")
    if name == "digits":
        raw = sklearn_datasets.load_digits()
        return Dataset(raw.data, np.where(raw.target >= 5, 1.0, -1.0), "classification",
                       "digits 5-9 -> +1, 0-4 -> -1")
    raw = sklearn_datasets.load_diabetes()
    return Dataset(raw.data, raw.target.astype(np.float64), "regression")


def read_csv(path: Path, target: str | None = None, task: LearningTask | None = None) -> Dataset:
    """A user's CSV: every column but `target` (default: the last) is a numeric feature.

    The first row is a header unless all its cells are numbers; then columns are named by
    their 0-based index ("0", "1", ...). Without `task`, a target with exactly two distinct
    values is a classification (the smaller value, or the first in alphabetical order, is −1)
    and a numeric one a regression.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: CSV file not found (datasets that need a download are read from a local copy)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the CSV file ({exc})") from None
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise ConfigError(f"{path}: not a valid CSV file ({exc})") from None
    if not rows:
        raise ConfigError(f"{path}: the CSV file is empty")
    header = [cell.strip() for cell in rows[0][1]]
    if all(_is_number(cell) for cell in header):
        header = [str(i) for i in range(len(header))]
    else:
        rows = rows[1:]
    if len(header) < 2 or not rows:
        raise ConfigError(f"{path}: needs a target column, at least one feature column and one data row")
    for line, row in rows:
        if len(row) != len(header):
            raise ConfigError(f"{path}: line {line} has {len(row)} fields, the header has {len(header)}")
    column = header[-1] if target is None else target
    if column not in header:
        raise ConfigError(f"{path}: no target column {column!r}; columns: {_listing(header)}")
    if header.count(column) > 1:
        raise ConfigError(f"{path}: two columns are named {column!r}, the target is ambiguous")
    target_index = header.index(column)
    features = [i for i in range(len(header)) if i != target_index]
    x = np.array([[_number(path, line, header[i], row[i]) for i in features] for line, row in rows])
    y, task, labels = _target(path, column, [(line, row[target_index]) for line, row in rows], task)
    return Dataset(x, y, task, labels)


def load_source(name: str, options: SourceOptions, rng: np.random.Generator, default_dimension: int) -> Dataset:
    """The dataset DATASET names, refusing options that do not apply to it (rather than ignoring them).

    Synthetic data without --dimension takes `default_dimension`: the topology's model length. A name
    that a registered learning task brings (node.tasks) is drawn by that task's loader, with --size and
    --dimension, and has the labels of that task.
    """
    brought = task_datasets()
    clashes = sorted(set(brought) & set(SYNTHETIC + BUNDLED))
    if clashes:
        raise ConfigError(f"task {brought[clashes[0]][0]!r} brings a dataset called {clashes[0]!r}, "
                          "a built-in source's name")
    given = {flag for flag, value in (("--size", options.size), ("--dimension", options.dimension),
                                      ("--label-noise", options.label_noise), ("--noise-std", options.noise_std),
                                      ("--target", options.target), ("--task", options.task)) if value is not None}
    takes = {"separable": {"--size", "--dimension", "--label-noise"},
             "regression": {"--size", "--dimension", "--noise-std"}}.get(name, set())
    if name.startswith(CSV_PREFIX):
        takes = {"--target", "--task"}
    elif name in brought:
        takes = {"--size", "--dimension"}
    elif name not in SYNTHETIC + BUNDLED:
        raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(SYNTHETIC + BUNDLED + tuple(brought))}, "
                          "or csv:PATH")
    if given - takes:
        raise ConfigError(f"{min(given - takes)} does not apply to dataset {name!r}")
    size = DEFAULT_SIZE if options.size is None else options.size
    dimension = default_dimension if options.dimension is None else options.dimension
    if name == "separable":
        label_noise = DEFAULT_LABEL_NOISE if options.label_noise is None else options.label_noise
        return separable(size, dimension, rng, label_noise)
    if name == "regression":
        noise_std = DEFAULT_NOISE_STD if options.noise_std is None else options.noise_std
        return noisy_regression(size, dimension, rng, noise_std)
    if name in BUNDLED:
        return bundled(name)
    if name in brought:
        task, loader = brought[name]
        raw = loader(size, dimension, rng)
        return Dataset(np.asarray(raw.x, dtype=np.float64), np.asarray(raw.y, dtype=np.float64),
                       task_spec(task).labels, raw.labels)
    return read_csv(Path(name[len(CSV_PREFIX):]), options.target, options.task)


# ---------------------------------------------------------------------------------------------
# Preparation and partitions


def train_test_indices(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random 80/20 split of `count` examples (at least one test example)."""
    order = rng.permutation(count)
    test_size = max(1, round(TEST_FRACTION * count))
    return order[test_size:], order[:test_size]


def prepare(data: Dataset, train: np.ndarray, test: np.ndarray) -> tuple[Examples, Examples]:
    """Standardise with the training rows' statistics only, then scale every row to unit norm.

    A constant feature (zero deviation) becomes 0, and a row that is all zeros afterwards
    stays zero, rather than either turning into NaN.
    """
    mean, std = data.x[train].mean(axis=0), data.x[train].std(axis=0)
    std = np.where(std > 0.0, std, 1.0)

    def rows(indices: np.ndarray) -> np.ndarray:
        standardised = (data.x[indices] - mean) / std
        norms = np.linalg.norm(standardised, axis=1, keepdims=True)
        return standardised / np.where(norms > 0.0, norms, 1.0)

    y = data.y
    if data.task == "regression":
        y_std = data.y[train].std()
        y = (data.y - data.y[train].mean()) / (y_std if y_std > 0.0 else 1.0)
    return Examples(rows(train), y[train]), Examples(rows(test), y[test])


def iid_shares(count: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A shuffle of the `count` training examples cut into n shares whose sizes differ by at most one."""
    return np.array_split(rng.permutation(count), n)


def label_skew_shares(groups: np.ndarray, n: int, skew: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Shares of the iid sizes whose label mix each node draws from a Dirichlet of concentration `skew`.

    Node v draws its mix q_v ~ Dirichlet(skew · p), p the labels' overall shares, so mixes
    average to p: small skew gives each node mostly one label, large skew approaches iid.
    The n mixes are rescaled together (iterative proportional fitting) until every node asks
    for exactly its share size and every label is asked for exactly as often as it occurs,
    so no node is left with whatever the others did not want; nodes then take, in a random
    order, the floor of their plan and one more of the labels with the largest remainders
    while they last. Every example lands in exactly one share. `groups` are the labels (for
    regression, target deciles: see skew_groups).
    """
    label_of, supply = np.unique(groups, return_inverse=True, return_counts=True)[1:]
    sizes = np.array([len(share) for share in np.array_split(np.arange(len(groups)), n)])
    plan = _fit_margins(rng.dirichlet(skew * supply / supply.sum(), size=n), sizes, supply)
    pools = [rng.permutation(np.flatnonzero(label_of == label)) for label in range(len(supply))]
    shares: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * n
    for node in rng.permutation(n):
        available = np.array([len(pool) for pool in pools])
        counts = np.minimum(np.floor(plan[node]).astype(np.int64), available)
        order = np.argsort(counts - plan[node], kind="stable")
        for most in (1, sizes[node]):  # one more for the largest remainders, then whatever still lasts
            for label in order:
                counts[label] += min(most, sizes[node] - counts.sum(), available[label] - counts[label])
        shares[node] = rng.permutation(np.concatenate([pool[:c] for pool, c in zip(pools, counts)]))
        pools = [pool[c:] for pool, c in zip(pools, counts)]
    return shares


def skew_groups(y: np.ndarray, task: LearningTask) -> np.ndarray:
    """What label skew skews: the ±1 label, or for regression the target's decile on the training set."""
    if task == "classification":
        return y
    edges = np.quantile(y, np.linspace(0.0, 1.0, REGRESSION_SKEW_BINS + 1)[1:-1])
    return np.searchsorted(edges, y, side="right")


# ---------------------------------------------------------------------------------------------
# Files


def node_train_file(data_dir: Path, node_id: int) -> Path:
    """Where `netdp data split` puts a node's training share."""
    return Path(data_dir) / f"{NODE_FILE_PATTERN.format(id=node_id)}.npz"


def write_split(out: Path, shares: list[Examples], test: Examples, info: DatasetInfo) -> None:
    """node-<id>.npz per node, test.npz and dataset.json, after removing node files a former split left.

    A stale node-<id>.json from `data generate` would otherwise be read before the new .npz,
    and a node-<id>.npz beyond the new node count would look like part of this split.
    """
    out.mkdir(parents=True, exist_ok=True)
    for path in out.iterdir():
        if (re.fullmatch(NODE_FILE_PATTERN.format(id=r"\d+"), path.stem) and path.suffix in SUPPORTED_SUFFIXES) or \
                path.name in (TEST_FILE, INFO_FILE):
            path.unlink()
    for node, share in enumerate(shares):
        np.savez(node_train_file(out, node), x=share.x, y=share.y)
    np.savez(out / TEST_FILE, x=test.x, y=test.y)
    save_model(info, out / INFO_FILE)


def write_minibatch_split(dataset: str, batch: int, topology: Topology, out: Path, seed: int) -> None:
    """The iid split `netdp data split DATASET` makes, refused when a node would not hold one whole minibatch."""
    shares, test, info, _ = split_dataset(dataset, topology, seed=seed, partition="iid", skew=None,
                                          options=SourceOptions())
    smallest = min(info.train_sizes.values())
    if smallest < batch:
        raise ConfigError(f"{dataset} leaves {smallest} training examples to some of the {topology.n} nodes, fewer "
                          f"than the minibatch of {batch}: use fewer nodes (--n) or a smaller minibatch")
    write_split(out, shares, test, info)


def load_dataset_info(data_dir: Path) -> DatasetInfo:
    """dataset.json of a split folder, validated (a ConfigError on a bad or missing file)."""
    return load_model(DatasetInfo, Path(data_dir) / INFO_FILE)


def load_test_set(data_dir: Path) -> tuple[DatasetInfo, np.ndarray, np.ndarray]:
    """The public held-out set and its metadata, checked against each other, for the auditor's utility."""
    info = load_dataset_info(data_dir)
    path = Path(data_dir) / TEST_FILE
    x, y = load_learning_data(path, info.dimension, task=LOSS_OF_TASK[info.task])
    if len(y) != info.test_size:
        raise ConfigError(f"{path}: {len(y)} examples, {INFO_FILE} says {info.test_size}")
    return info, x, y


# ---------------------------------------------------------------------------------------------
# Command line


def split_dataset(name: str, topology: Topology, *, seed: int, partition: Partition, skew: float | None,
                  options: SourceOptions) -> tuple[list[Examples], Examples, DatasetInfo, str]:
    """The whole split in memory: the nodes' shares, the test set, dataset.json and the label note.

    One seed drives three independent streams (the synthetic draw, the 80/20 split, the
    partition), so the same seed gives the same test set whatever the partition.
    """
    source_rng, split_rng, partition_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    params = topology.protocol
    if getattr(params, "task", None) is None:
        raise ConfigError(f"the topology's protocol {params.name} learns no model; make the topology with a "
                          "learning protocol (--protocol muffliato-gd)")
    data = load_source(name, options, source_rng, default_dimension=params.dimension)
    _check_topology_fits(topology, name, data)
    train, test = train_test_indices(len(data.y), split_rng)
    if len(train) < topology.n:
        more = " (pass a larger --size)" if name in SYNTHETIC or name in task_datasets() else ""
        raise ConfigError(f"{name}: too few examples for {topology.n} nodes: {len(data.y)} leave {len(train)} for "
                          f"training, and each node needs one{more}")
    train_set, test_set = prepare(data, train, test)
    if partition == "iid":
        indices = iid_shares(len(train_set.y), topology.n, partition_rng)
    else:
        indices = label_skew_shares(skew_groups(train_set.y, data.task), topology.n, skew, partition_rng)
    shares = [Examples(train_set.x[rows], train_set.y[rows]) for rows in indices]
    info = DatasetInfo(dataset=name, task=data.task, dimension=data.x.shape[1], n_nodes=topology.n,
                       partition=partition, skew=skew, seed=seed,
                       train_sizes={v: len(share.y) for v, share in enumerate(shares)}, test_size=len(test_set.y))
    return shares, test_set, info, data.labels


def _split_command(args: argparse.Namespace) -> int:
    topology = load_topology(args.topology)
    seed = chosen_seed(args.seed)
    for flag, value in (("--size", args.size), ("--dimension", args.dimension)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, not {value}")
    if args.label_noise is not None and not 0.0 <= args.label_noise <= 1.0:
        raise ConfigError(f"--label-noise is a probability, not {args.label_noise}")
    if args.noise_std is not None and not (math.isfinite(args.noise_std) and args.noise_std >= 0.0):
        raise ConfigError(f"--noise-std must be a finite number, 0 or more, not {args.noise_std}")
    if args.partition == "iid" and args.skew is not None:
        raise ConfigError("--skew applies to --partition label-skew only")
    skew = (DEFAULT_SKEW if args.skew is None else args.skew) if args.partition == "label-skew" else None
    if skew is not None and not (math.isfinite(skew) and skew > 0.0):
        raise ConfigError(f"--skew is a Dirichlet concentration, a positive number, not {skew}")
    out = output_folder(args.out, force=args.force)
    options = SourceOptions(size=args.size, dimension=args.dimension, label_noise=args.label_noise,
                            noise_std=args.noise_std, target=args.target, task=args.task)
    shares, test, info, labels = split_dataset(args.dataset, topology, seed=seed, partition=args.partition,
                                               skew=skew, options=options)
    write_split(out, shares, test, info)
    smallest, largest = min(info.train_sizes.values()), max(info.train_sizes.values())
    sizes = f"{smallest}" if smallest == largest else f"{smallest}-{largest}"
    partition = info.partition + ("" if skew is None else f" (skew {skew:g})")
    print(f"wrote {info.n_nodes} training files ({sizes} examples each, {partition}), "
          f"{TEST_FILE} ({info.test_size} examples) and {INFO_FILE} to {out}: {info.dataset}, {info.task}, "
          f"dimension {info.dimension}, {FEATURES} (seed {seed}; pass --seed {seed} to make them again)")
    if labels:
        print(f"labels: {labels}")
    return 0


def register_split(data_sub: argparse._SubParsersAction) -> None:
    """`netdp data split`, added beside `data generate`."""
    split = data_sub.add_parser(
        "split", help="a learning dataset, prepared and split into per-node training files",
        description="Prepare a learning dataset as the papers do (80/20 train/test split, features standardised "
                    "with training statistics, unit-norm rows, labels -1/+1) and write node-<id>.npz per node, "
                    "test.npz and dataset.json.")
    split.add_argument("dataset", metavar="DATASET",
                       help=f"{', '.join(SYNTHETIC)} (synthetic), {', '.join(BUNDLED)} (bundled with scikit-learn; "
                            "digits is 0-4 vs 5-9), csv:PATH (a local CSV file), or a dataset an installed "
                            "learning task brings")
    split.add_argument("--topology", type=Path, required=True,
                       help="topology file of a learning protocol (gives the nodes; its model dimension and loss "
                            "are checked against the data)")
    split.add_argument("--out", type=Path, required=True, help="new or empty folder for the files")
    split.add_argument("--seed", type=int, default=None, help="seed of the split (default: a fresh one, printed)")
    split.add_argument("--partition", choices=get_args(Partition), default="iid",
                       help="iid: shuffled equal shares; label-skew: equal shares, each node's label mix drawn "
                            "from Dirichlet(--skew) (regression: target deciles)")
    split.add_argument("--skew", type=float, default=None,
                       help=f"Dirichlet concentration for label-skew, smaller is more skewed (default {DEFAULT_SKEW})")
    split.add_argument("--target", default=None, help="csv: the target column's name (default: the last column)")
    split.add_argument("--task", choices=get_args(LearningTask), default=None,
                       help="csv: the target's task (default: two values -> classification, numbers -> regression)")
    split.add_argument("--dimension", type=int, default=None, help="synthetic: number of features (default: the "
                       "topology's model dimension)")
    split.add_argument("--size", type=int, default=None, help=f"synthetic: examples in all (default {DEFAULT_SIZE})")
    split.add_argument("--label-noise", type=float, default=None,
                       help=f"separable: probability of flipping each label (default {DEFAULT_LABEL_NOISE:g})")
    split.add_argument("--noise-std", type=float, default=None,
                       help=f"regression: std of the additive Gaussian noise (default {DEFAULT_NOISE_STD:g})")
    split.add_argument("--force", action="store_true", help="write into a folder that already holds files")
    split.set_defaults(handler=_split_command)


# ---------------------------------------------------------------------------------------------
# Helpers


def _check_topology_fits(topology: Topology, name: str, data: Dataset) -> None:
    """The data must fit the model dimension and the labels of the loss the topology publishes, or every node
    would refuse them (or learn nonsense)."""
    params = topology.protocol
    loss, dimension = LOSS_OF_TASK[data.task], data.x.shape[1]
    if task_spec(params.task).labels != data.task:
        raise ConfigError(f"{name} is a {data.task} task; the topology's {params.name} uses the {params.task} loss "
                          f"(make the topology with --task {loss})")
    if params.dimension != dimension:
        raise ConfigError(f"{name} has {dimension} features; the topology's model has dimension {params.dimension} "
                          f"(make the topology with --dimension {dimension})")


def _fit_margins(mix: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """`mix` rescaled by rows and columns until its row sums are `rows` and its column sums `columns`.

    The small floor keeps a label that no node drew (a tiny skew) fittable; it stays tiny.
    """
    plan = mix + 1e-9
    for _ in range(IPF_ITERATIONS):
        plan *= (rows / plan.sum(axis=1))[:, None]
        plan *= columns / plan.sum(axis=0)
        if np.allclose(plan.sum(axis=1), rows, rtol=0.0, atol=1e-6):
            break
    return plan


def _target(path: Path, column: str, cells: list[tuple[int, str]], task: LearningTask | None
            ) -> tuple[np.ndarray, LearningTask, str]:
    """A CSV target column (line, cell) as ±1 labels or float targets, with the task it was read as."""
    values = [cell.strip() for _, cell in cells]
    numeric = all(_is_number(value) for value in values)
    keys: list[float] | list[str] = [float(value) for value in values] if numeric else values
    classes = sorted(set(keys))
    if task is None:
        task = "classification" if len(classes) == 2 else "regression" if numeric else None
        if task is None:
            raise ConfigError(f"{path}: target column {column!r} has {len(classes)} distinct non-numeric "
                              f"value{'s' if len(classes) != 1 else ''}; "
                              "a classification target needs exactly two (pick another with --target)")
    if task == "regression":
        return np.array([_number(path, line, column, cell) for line, cell in cells]), task, ""
    if len(classes) != 2:
        raise ConfigError(f"{path}: target column {column!r} has {len(classes)} distinct values; "
                          "classification here is binary and needs exactly two")
    negative, positive = (f"{c:g}" if numeric else repr(c) for c in classes)
    y = np.where(np.array(keys, dtype=object) == classes[1], 1.0, -1.0)
    return y, task, f"{column} {negative} -> -1, {positive} -> +1"


def _number(path: Path, line: int, column: str, cell: str) -> float:
    """One feature cell as a finite float, or a one-line error that says where it is."""
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"{path}: line {line}, column {column!r}: {cell.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{path}: line {line}, column {column!r}: {cell.strip()!r} is not a finite number")
    return value


def _is_number(cell: str) -> bool:
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def _listing(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)
