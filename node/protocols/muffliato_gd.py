"""Muffliato-GD / SGD (Muffliato Alg. 3): a noisy local gradient step, then K gossip rounds, T times.

At step t every node computes its step gradient on its own data (the whole local set, or a
minibatch of b examples taken cyclically from it: a fixed schedule that needs no secret),
each example's gradient clipped to norm C, adds N(0, σ² I) to it (a fresh draw every step,
logged privately under the step), takes θ ← θ − η (g + z), then runs K rounds of plain or
Chebyshev gossip on the models with that step's neighbours: the fixed graph, or the step's
Erdős–Rényi graph that every node derives from the published seed. Round r of the run is
gossip round r mod K of step r // K; a value from a node that is not a neighbour in that
step is refused. Drop-outs are handled as in synchronous Muffliato. The output is the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from node import data
from node.errors import ConfigError
from node.learning import Task, clipped_gradient
from node.mixing import chebyshev_omega
from node.protocols.base import NodeOutput, ProtocolSpec
from node.protocols.gossip import BarrierRounds, run_gossip
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "muffliato-gd"
NOISE_PURPOSE = "gradient"
Adjacency = Literal["example", "dataset"]


def derived_sensitivity(clip: float, adjacency: Adjacency, batch: int | None) -> float:
    """Δ of one step's gradient: 2C/b when one of b averaged examples is replaced, 2C for a whole dataset.

    Full-batch GD with replace-one adjacency depends on each node's local size, which the
    published parameters do not know: that case needs an explicit Δ (or a minibatch size).
    """
    if adjacency == "dataset":
        return 2.0 * clip
    if batch is None:
        raise ValueError("replace-one adjacency with full-batch gradients needs --sensitivity or --batch")
    return 2.0 * clip / batch


class MuffliatoGDParams(NoisyVectorParams):
    """Public parameters of Muffliato-GD/SGD (Alg. 3)."""

    name: Literal["muffliato-gd"] = "muffliato-gd"
    sigma: float = Field(ge=0.0, description="std of the Gaussian noise added to every gradient step")
    sensitivity: float = Field(gt=0.0, description="Δ: bound on the change of one node's step gradient "
                                                   "between adjacent datasets")
    dimension: int = Field(ge=1, description="number of features D (the model's length)")
    task: Task = Field(description="the local loss: logistic regression (labels ±1) or least squares")
    steps: int = Field(ge=1, description="gradient steps T")
    gossip_rounds: int = Field(ge=1, description="gossip rounds K after every step")
    accelerated: bool = Field(False, description="Chebyshev acceleration of the K rounds (fixed graphs only)")
    learning_rate: float = Field(gt=0.0, description="step size η")
    clip: float = Field(gt=0.0, description="per-example gradient norm bound C")
    batch: int | None = Field(None, ge=1, description="minibatch size b (SGD); none: the whole local set (GD)")
    adjacency: Adjacency = Field("example", description="neighbouring datasets: one example replaced, or all")
    regularization: float = Field(0.0, ge=0.0, description="L2 regularisation λ")

    @model_validator(mode="after")
    def _sensitivity_covers_the_clip(self) -> "MuffliatoGDParams":
        if self.batch is not None or self.adjacency == "dataset":
            derived = derived_sensitivity(self.clip, self.adjacency, self.batch)
            if self.sensitivity < derived * (1 - 1e-12):
                raise ValueError(f"sensitivity {self.sensitivity:g} is below {derived:g}, the bound that clip "
                                 f"{self.clip:g} gives with {self.adjacency} adjacency: the noise would not cover it")
        return self

    @property
    def rounds(self) -> int:
        """Gossip rounds in the whole run: K per step."""
        return self.steps * self.gossip_rounds

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """How long a run may take when every round waits its deadline twice over."""
        return self.rounds * network.round_deadline_s * 2


@dataclass(frozen=True)
class LocalData:
    """A node's training examples (rows of x) and labels or targets y."""

    x: np.ndarray
    y: np.ndarray

    def batch(self, step: int, size: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Step `step`'s examples: all of them, or the next `size` in cyclic order."""
        if size is None:
            return self.x, self.y
        rows = (step * size + np.arange(size)) % len(self.y)
        return self.x[rows], self.y[rows]


def load_local_data(path: Path, params: Any) -> LocalData:
    """The node's training share, checked against the published dimension and batch size."""
    x, y = data.load_learning_data(path, params.dimension, task=params.task)
    if params.batch is not None and params.batch > len(y):
        raise ConfigError(f"{path}: {len(y)} examples, fewer than the minibatch size {params.batch}")
    return LocalData(x, y)


class MuffliatoGDNode:
    """One node's part: T noisy gradient steps, each followed by K gossip rounds on the step's graph."""

    def __init__(self, context: ProtocolContext, local: LocalData) -> None:
        self._context = context
        self._data = local
        self._rounds = BarrierRounds(context, rounds_per_step=context.params.gossip_rounds)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        topology, node = context.topology, context.node_id
        # Every node the schedule may pair this one with must be up before step 0's graph is used.
        await context.wait_for_peers(topology.neighbours[node], context.network.startup_deadline_s)
        omega = chebyshev_omega(topology.spectral_gap) if params.accelerated else None
        model = np.zeros(params.dimension)
        for step in range(params.steps):
            await context.step_started(step)
            x, y = self._data.batch(step, params.batch)
            gradient = clipped_gradient(params.task, model, x, y, clip=params.clip,
                                        regularization=params.regularization)
            await context.private_input(gradient.value, gradient.clipped > 0)
            noisy = await context.noise.gaussian(gradient.value, params.sigma, step=step, purpose=NOISE_PURPOSE)
            first = step * params.gossip_rounds
            model = await run_gossip(model - params.learning_rate * noisy,
                                     range(first, first + params.gossip_rounds),
                                     topology.weight_row_at(node, step), node, self._rounds.exchange, omega)
        return NodeOutput(model, params.steps)


SPEC = ProtocolSpec(PROTOCOL_NAME, MuffliatoGDParams, MuffliatoGDNode, load=load_local_data)
