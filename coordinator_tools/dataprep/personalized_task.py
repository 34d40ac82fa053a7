"""The AISTATS 2018 synthetic task (Sec. 5.1, after Vanhaesebrouck et al. 2017): agents with related separators.

Every agent i has a hidden target linear separator θ*_i, a unit vector whose first two features
are (cos a_i, sin a_i) with a_i uniform on the circle (the other p − 2 features carry no signal),
so agents with close angles have close tasks. The graph weight between two agents is their
similarity W_ij = exp((cos φ_ij − 1)/γ), φ_ij the angle between their targets, γ = 0.1; weights
below `min_weight` are negligible and dropped (angles are drawn again, from the same seed, until
the graph is connected). Agent i gets m_i ~ U{10..100} training points, each drawn uniformly in
the cube [−1/√p, 1/√p]^p around the origin (so every row has l2 norm at most 1: the logistic
loss's smoothness bound 1/4 holds) and labelled by the sign of ⟨θ*_i, x⟩, each label flipped with
probability 0.05; and its own test set of 100 clean points. The loss is logistic, λ_i = 1/m_i.

Published: the similarities scaled so every row sums to at most 1 (the topology's bound on
weights; update (6) and the minimiser of objective (2) do not change, see `node.personalized`).
Files: node-<id>.npz (x, y: the agent's training set, private), test.npz (x, y and `agent`, the
owner of each row: every agent's held-out set, public to the auditor), task.json (TaskInfo) and
similarity.edges (u v W_uv, the published weights: `netdp topology import` makes the topology).
`netdp data personalized` writes them; `netdp demo --protocol personalized-cd` runs them.
`AgentTasks`, `task_topology`, `write_task` and `load_test_sets` serve every task of personalized
CD in these files (`recommendation_task` too).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from coordinator_tools.dataprep.datasets import chosen_seed, output_folder
from coordinator_tools.dataprep.learning_data import node_train_file
from coordinator_tools.topology.build import build_topology
from node import data as node_data
from node.errors import ConfigError
from node.learning import LocalData, Task
from node.schema import load_model, save_model
from node.topology import NetworkParams, ProtocolParams, Topology

GRAPH_NAME = "similarity"  # how the topology names its graph: the task's similarities
TEST_FILE = "test.npz"
INFO_FILE = "task.json"
EDGES_FILE = "similarity.edges"
GAMMA = 0.1
MIN_WEIGHT = 1e-3
LABEL_NOISE = 0.05
TRAIN_SIZES = (10, 100)
TEST_PER_AGENT = 100
MAX_DRAWS = 1000  # angle draws tried for a connected graph


class TaskInfo(BaseModel):
    """task.json: how the task was made, and each agent's target angle (the hidden truth, for experiments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(ge=2)
    dimension: int = Field(ge=2, description="p: features per example")
    gamma: float = Field(gt=0.0)
    min_weight: float = Field(ge=0.0, lt=1.0)
    label_noise: float = Field(ge=0.0, le=1.0)
    seed: int = Field(ge=0)
    angles: list[float] = Field(description="a_i: agent i's target is (cos a_i, sin a_i, 0, ..., 0)")
    train_sizes: list[int] = Field(description="m_i of every agent")
    test_per_agent: int = Field(ge=1)

    @model_validator(mode="after")
    def _one_entry_per_agent(self) -> TaskInfo:
        if len(self.angles) != self.n or len(self.train_sizes) != self.n:
            raise ValueError(f"angles and train_sizes need one entry per agent (n = {self.n})")
        return self


@dataclasses.dataclass(frozen=True)
class AgentTasks:
    """A personalized-learning task in memory: its description, every agent's training and test sets, the
    similarity weights; what any task of personalized CD (this one, `recommendation_task`) writes and publishes."""

    info: BaseModel  # written as task.json
    train: list[LocalData]
    test: list[LocalData]
    weights: dict[tuple[int, int], float]  # W_ij of every kept pair i < j (unscaled similarities)

    def graph(self) -> nx.Graph:
        """The agents and their kept similarities, as a graph."""
        graph = nx.Graph()
        graph.add_nodes_from(range(len(self.train)))
        graph.add_edges_from(self.weights)
        return graph

    def published_weights(self) -> dict[tuple[int, int], float]:
        """The similarities divided by the largest degree D_ii, so every row sums to at most 1."""
        degrees = np.zeros(len(self.train))
        for (u, v), weight in self.weights.items():
            degrees[[u, v]] += weight
        return {edge: weight / float(degrees.max()) for edge, weight in self.weights.items()}


@dataclasses.dataclass(frozen=True)
class PersonalizedTask(AgentTasks):
    """The synthetic task in memory."""

    info: TaskInfo


def task_topology(task: AgentTasks, protocol: ProtocolParams, *, run_id: str,
                  addresses: Sequence[str] | None = None, network: NetworkParams | None = None) -> Topology:
    """The published topology of the task: its similarity graph with the scaled weights (default deadlines)."""
    return build_topology(task.graph(), graph_name=GRAPH_NAME, run_id=run_id, protocol=protocol, addresses=addresses,
                          network=network or NetworkParams(), explicit_weights=task.published_weights())


def targets(angles: np.ndarray, dimension: int) -> np.ndarray:
    """The unit target separators: (cos a_i, sin a_i) in the first two features, zeros elsewhere."""
    separators = np.zeros((len(angles), dimension))
    separators[:, 0], separators[:, 1] = np.cos(angles), np.sin(angles)
    return separators


def similarity_weights(separators: np.ndarray, gamma: float = GAMMA,
                       min_weight: float = MIN_WEIGHT) -> dict[tuple[int, int], float]:
    """W_ij = exp((cos φ_ij − 1)/γ) of every pair i < j whose weight is not negligible."""
    unit = separators / np.linalg.norm(separators, axis=1, keepdims=True)
    similarity = np.exp((np.clip(unit @ unit.T, -1.0, 1.0) - 1.0) / gamma)
    u, v = np.nonzero(np.triu(similarity >= min_weight, k=1))
    return {(int(i), int(j)): float(similarity[i, j]) for i, j in zip(u, v)}


def generate_task(n: int, dimension: int, seed: int, *, gamma: float = GAMMA, min_weight: float = MIN_WEIGHT,
                  label_noise: float = LABEL_NOISE, test_per_agent: int = TEST_PER_AGENT) -> PersonalizedTask:
    """The whole task from one seed (angles, then sizes and points, from independent streams)."""
    if n < 2 or dimension < 2:
        raise ConfigError(f"the personalized task needs at least 2 agents and 2 features, got n = {n}, "
                          f"p = {dimension}")
    angle_rng, data_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    for _ in range(MAX_DRAWS):
        angles = angle_rng.uniform(0.0, 2.0 * math.pi, n)
        separators = targets(angles, dimension)
        weights = similarity_weights(separators, gamma, min_weight)
        graph = nx.Graph(list(weights))
        graph.add_nodes_from(range(n))
        if nx.is_connected(graph):
            break
    else:
        raise ConfigError(f"{n} agents at gamma = {gamma:g} never gave a connected similarity graph in {MAX_DRAWS} "
                          "draws: use more agents or a smaller --min-weight")
    sizes = data_rng.integers(TRAIN_SIZES[0], TRAIN_SIZES[1] + 1, n)
    train = [_points(separator, int(size), label_noise, data_rng) for separator, size in zip(separators, sizes)]
    test = [_points(separator, test_per_agent, 0.0, data_rng) for separator in separators]
    info = TaskInfo(n=n, dimension=dimension, gamma=gamma, min_weight=min_weight, label_noise=label_noise,
                    seed=seed, angles=angles.tolist(), train_sizes=sizes.tolist(), test_per_agent=test_per_agent)
    return PersonalizedTask(info, train, test, weights)


def _points(separator: np.ndarray, count: int, label_noise: float, rng: np.random.Generator) -> LocalData:
    """`count` points uniform in the cube of half-side 1/√p, labelled by the separator, some labels flipped."""
    x = rng.uniform(-1.0, 1.0, (count, separator.size)) / math.sqrt(separator.size)
    y = np.where(x @ separator >= 0.0, 1.0, -1.0)
    return LocalData(x, np.where(rng.random(count) < label_noise, -y, y))


def write_task(task: AgentTasks, out: Path) -> None:
    """node-<id>.npz for every agent, test.npz (with each row's agent), task.json and similarity.edges."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{u} {v} {weight!r}" for (u, v), weight in task.published_weights().items()]
    (out / EDGES_FILE).write_text(f"# {GRAPH_NAME} weights, scaled to rows of at most 1\n" + "\n".join(lines) + "\n",
                                  encoding="utf-8")
    for agent, share in enumerate(task.train):
        np.savez(node_train_file(out, agent), x=share.x, y=share.y)
    owners = np.concatenate([np.full(len(share.y), agent) for agent, share in enumerate(task.test)])
    np.savez(out / TEST_FILE, x=np.concatenate([share.x for share in task.test]),
             y=np.concatenate([share.y for share in task.test]), agent=owners)
    save_model(task.info, out / INFO_FILE)


def load_task_info(data_dir: Path) -> TaskInfo:
    """task.json of a task folder, validated (a one-line ConfigError on a bad or missing file)."""
    return load_model(TaskInfo, Path(data_dir) / INFO_FILE)


def load_test_sets(data_dir: Path, dimension: int, task: Task = "logistic") -> list[LocalData]:
    """Every agent's held-out set from test.npz, in agent order (labels ±1, or real targets for least squares)."""
    path = Path(data_dir) / TEST_FILE
    x, y = node_data.load_learning_data(path, dimension, task=task)
    with np.load(path, allow_pickle=False) as archive:
        if "agent" not in archive.files:
            raise ConfigError(f"{path}: no array 'agent' (each row's agent) in a personalized task's test set")
        owners = archive["agent"]
    if owners.shape != y.shape:
        raise ConfigError(f"{path}: {owners.size} owners for {y.size} test examples")
    return [LocalData(x[owners == agent], y[owners == agent]) for agent in range(int(owners.max()) + 1)]


def _task_command(args: argparse.Namespace) -> int:
    out = output_folder(args.out, force=args.force)
    seed = chosen_seed(args.seed)
    task = generate_task(args.n, args.dimension, seed, min_weight=args.min_weight)
    write_task(task, out)
    sizes = task.info.train_sizes
    print(f"wrote {args.n} agents' training files ({min(sizes)}-{max(sizes)} points), {TEST_FILE}, {INFO_FILE} and "
          f"{EDGES_FILE} ({len(task.weights)} similarities) to {out} (seed {seed}; pass --seed {seed} to make them "
          f"again); publish with: netdp topology import {out / EDGES_FILE} --protocol personalized-cd "
          f"--dimension {args.dimension} --max-examples {TRAIN_SIZES[1]} ...")
    return 0


def register_task(data_sub: argparse._SubParsersAction) -> None:
    """`netdp data personalized`, beside `data generate` and `data split`."""
    command = data_sub.add_parser(
        "personalized", help="the AISTATS 2018 synthetic task of personalized learning, per-agent files and weights",
        description="Agents with target separators at random angles, their similarity weights "
                    "exp((cos phi - 1)/gamma), 10-100 labelled points each (5%% label noise) and 100 test points "
                    "each: node-<id>.npz, test.npz, task.json and similarity.edges.")
    command.add_argument("--n", type=int, default=100, help="agents (default 100)")
    command.add_argument("--dimension", type=int, default=5, help="features p (default 5)")
    command.add_argument("--min-weight", type=float, default=MIN_WEIGHT,
                         help=f"similarities below this are negligible and dropped (default {MIN_WEIGHT:g})")
    command.add_argument("--out", type=Path, required=True, help="new or empty folder for the files")
    command.add_argument("--seed", type=int, default=None, help="seed of the task (default: a fresh one, printed)")
    command.add_argument("--force", action="store_true", help="write into a folder that already holds files")
    command.set_defaults(handler=_task_command)
