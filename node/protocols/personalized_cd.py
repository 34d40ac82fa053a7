"""Personalized and private P2P learning (AISTATS 2018): asynchronous coordinate descent with broadcasts.

Every agent owns its model Θ_i (zeros at the start, public) and its data. It wakes on its own
Poisson clock (rate `tick_rate`; the wake-up times are public, drawn without secret randomness)
and at each wake-up:
1. takes the newest model each neighbour has broadcast (`LatestValues`; a neighbour not heard
   from yet counts with its public initial model);
2. in the private variant, pays the step's ε from its budget: the ledger logs the spend to the
   public view log together with the inputs of the step (which neighbour broadcasts it uses),
   durably, before anything of the step is released, and stops the agent when the budget
   cannot pay; then draws Laplace noise of scale s = 2L₀ / (ε m_i) from its own sampler for its
   clipped gradient (logged privately with the gradient);
3. applies update (6) (`node.personalized`) and broadcasts Θ̃_i to every neighbour, one way:
   one try each, no reply, the next broadcast supersedes it (sequence numbers from 1).

Budgets: every agent has (ε̄_i, δ̄_i), the published default or its own entry in `budgets`, split
equally over its T_i = `updates` wake-ups by the paper's Thm 1 (`node.budget.equal_split`).
With `epsilon` unset the agent runs non-private CD: no noise, no budget, T_i updates.
An agent stops after T_i updates or when its budget is spent, whichever comes first, and outputs
its last model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from netdp.v1 import viewlog_pb2
from node import data
from node.budget import BudgetExhausted, BudgetLedger, equal_split
from node.delivery import LatestValueDelivery
from node.learning import LocalData, Task
from node.mailboxes.latest_value import Latest
from node.message import Message, MessageId
from node.personalized import AgentProblem
from node.protocols.base import NodeOutput, ProtocolSpec

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "personalized-cd"
MODEL = "model"  # the broadcast of an agent's model, sequence = its update count
NOISE_PURPOSE = "gradient"  # the draw's step is the agent's update index


class AgentBudget(BaseModel):
    """One agent's own (ε̄_i, δ̄_i), overriding the published default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: int = Field(ge=0)
    epsilon: float = Field(gt=0.0, description="ε̄_i over the whole run")
    delta: float = Field(0.0, ge=0.0, lt=1.0, description="δ̄_i of Thm 1's composition")


class PersonalizedCDParams(BaseModel):
    """Public parameters of personalized coordinate descent (AISTATS 2018, update (6))."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["personalized-cd"] = "personalized-cd"
    dimension: int = Field(ge=1, description="p: length of every agent's model")
    task: Task = Field("logistic", description="the local loss: logistic regression (labels ±1) or least squares")
    mu: float = Field(gt=0.0, description="μ: weight of the local losses against the graph term of objective (2)")
    lipschitz: float = Field(1.0, gt=0.0, description="L₀: every example's loss gradient is clipped to l1 norm L₀")
    smoothness: float = Field(0.25, ge=0.0, description="bound on the smoothness of the data term of every L_i "
                                                        "(logistic on rows of l2 norm <= 1: 1/4); 2 λ_i is added")
    regularization: float | None = Field(None, ge=0.0, description="λ_i of every agent; none: λ_i = 1/m_i")
    max_examples: int = Field(ge=1, description="m_max: an agent's confidence is c_i = min(1, m_i / m_max)")
    updates: int = Field(ge=1, description="T_i: wake-ups of every agent, over which its budget is split")
    epsilon: float | None = Field(None, gt=0.0, description="ε̄_i of every agent; none: non-private CD")
    delta: float = Field(0.0, ge=0.0, lt=1.0, description="δ̄_i of every agent (Thm 1's composition)")
    budgets: tuple[AgentBudget, ...] = Field((), description="agents with their own (ε̄_i, δ̄_i)")
    tick_rate: float = Field(20.0, gt=0.0, le=10_000.0, description="rate of every agent's Poisson clock, per second")
    alpha: float = Field(2.0, gt=1.0, description="Rényi order used in reports")

    @model_validator(mode="after")
    def _budgets(self) -> PersonalizedCDParams:
        nodes = [budget.node for budget in self.budgets]
        if self.epsilon is None and nodes:
            raise ValueError("per-agent budgets need a private run: set epsilon too")
        if len(set(nodes)) != len(nodes):
            raise ValueError("an agent is listed twice in budgets")
        return self

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    @property
    def sigma(self) -> float:
        """The noise level as reports show it under `sigma`: 1 (the logged Laplace scales), 0 for non-private CD."""
        return 1.0 if self.private else 0.0

    @property
    def sensitivity(self) -> float:
        """2L₀: the l1 change of one example's clipped gradient (an agent's ∇L_i moves by that over m_i)."""
        return 2.0 * self.lipschitz

    def budget_of(self, node: int) -> tuple[float, float] | None:
        """(ε̄_i, δ̄_i) of an agent; None in non-private CD."""
        if self.epsilon is None:
            return None
        own = [budget for budget in self.budgets if budget.node == node]
        return (own[0].epsilon, own[0].delta) if own else (self.epsilon, self.delta)

    def step_epsilon(self, node: int) -> float | None:
        """The ε each of an agent's T_i steps spends: its budget split equally by Thm 1."""
        budget = self.budget_of(node)
        return None if budget is None else equal_split(*budget, self.updates)

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Three times the clock's expected time for T_i updates, and a broadcast deadline per update."""
        return self.updates * (3.0 / self.tick_rate + network.round_deadline_s)


def check_topology(topology: Topology) -> None:
    """Every agent named in `budgets` is a node of the topology."""
    outside = [budget.node for budget in topology.protocol.budgets if budget.node >= topology.n]
    if outside:
        raise ValueError(f"budgets name node {outside[0]}, which does not exist (n = {topology.n})")


def load_agent_data(path: Path, params: Any) -> LocalData:
    """An agent's training set (NPZ of x and y), checked against the published dimension and task."""
    return LocalData(*data.load_learning_data(path, params.dimension, task=params.task))


def inputs_record(step: int, inputs: dict[int, Latest]) -> viewlog_pb2.Record:
    """The public record of which neighbour broadcasts a step used (a neighbour absent: its initial model)."""
    refs = [viewlog_pb2.MessageRef(peer=peer, kind=MODEL, sequence=latest.sequence)
            for peer, latest in sorted(inputs.items())]
    return viewlog_pb2.Record(step_inputs=viewlog_pb2.StepInputs(step=step, inputs=refs))


class PersonalizedCDNode:
    """One agent's part: wake up, pay, update with the neighbours' latest models, broadcast."""

    def __init__(self, context: ProtocolContext, local: LocalData) -> None:
        self._context = context
        params = context.params
        self._problem = AgentProblem.of(params, context.topology, context.node_id, local)
        self._models = context.latest_values(MODEL)
        budget = params.budget_of(context.node_id)
        self._ledger = None if budget is None else BudgetLedger(context.journal, *budget)
        self._step_epsilon = params.step_epsilon(context.node_id)
        self._initial = np.zeros(params.dimension)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        await context.wait_for_peers(context.neighbours(), context.network.startup_deadline_s)
        clock = np.random.default_rng()  # the wake-up times are public: they need no secret randomness
        theta, updates = self._initial, 0
        while updates < params.updates:
            await asyncio.sleep(clock.exponential(1.0 / params.tick_rate))
            await context.step_started(updates)
            try:
                theta = await self._update(theta, updates)
            except BudgetExhausted:
                break
            await context.broadcast(context.neighbours(), Message(MODEL, MessageId(sequence=updates + 1), theta),
                                    LatestValueDelivery(), context.network.round_deadline_s)
            updates += 1
        return NodeOutput(theta, updates)

    async def _update(self, theta: np.ndarray, step: int) -> np.ndarray:
        """Update (6) at this wake-up; in the private variant the spend is logged before the noise is drawn."""
        context = self._context
        inputs = self._models.snapshot()
        gradient, clipped = self._problem.gradient(theta)
        noisy = gradient
        if self._ledger is None:
            await context.journal.write(inputs_record(step, inputs))
            await context.private_input(gradient, clipped > 0)
        else:
            scale, spent = context.noise.laplace_scale(self._problem.sensitivity, self._step_epsilon)
            await self._ledger.spend(step, spent, alongside=(inputs_record(step, inputs),))
            await context.private_input(gradient, clipped > 0)
            noisy = await context.noise.laplace(gradient, scale, step=step, purpose=NOISE_PURPOSE)
        neighbours = {peer: inputs[peer].value if peer in inputs else self._initial for peer in self._problem.weights}
        return self._problem.update(theta, neighbours, noisy)


SPEC = ProtocolSpec(PROTOCOL_NAME, PersonalizedCDParams, PersonalizedCDNode, load=load_agent_data)
