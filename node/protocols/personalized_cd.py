"""Personalized and private P2P learning (AISTATS 2018): asynchronous coordinate descent with broadcasts.

Every agent owns its model Θ_i (zeros at the start, public, or its private warm start) and its
data. It wakes on its own Poisson clock (rate `tick_rate`; the wake-up times are public, drawn
without secret randomness) and at each wake-up:
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
over its T_i = `updates` wake-ups so that Thm 1's composition meets it exactly: equally
(`budget_split` "equal"), or by Prop. 2 at the expected global iteration of each wake-up
("proposition2", `node.budget.proposition2_shape`). With `warm_start_epsilon`, an agent first
releases its purely local model with Laplace noise (ε_ws-DP, `AgentProblem.local_model`) as its
release 0 (broadcast sequence 1), pays ε_ws from ε̄_i before it does, and starts CD from it;
its updates split what remains. With `warm_start_propagation` P > 0 the warm start is the paper's
(supplementary Sec. C): before its updates, an agent makes P wake-ups of model propagation, each the
exact block minimisation (16) of objective (15) with the released noisy local models in place of
the local ones (`AgentProblem.propagate`), broadcast like an update. A propagation step reads only
the agent's own released warm start and its neighbours' broadcasts, all already released, and
never the data: it is post-processing, spends nothing and draws no noise. An agent's wake-ups are
numbered from 0 (its P propagation steps, then update t as wake-up P + t: the step of its
`step_inputs` records and gradient draws); its broadcast of wake-up k has sequence w + k + 1 (w = 1
with a warm start), its warm start sequence 1. A budget record's step is the paid release index
(the warm start 0, update t then w + t), which propagation steps do not advance.
With `epsilon` unset the agent runs non-private CD: no noise, no budget, T_i updates.
An agent stops after T_i updates or when its budget is spent, whichever comes first, and outputs
its last model.

An audit run (`canaries` M > 0, `node.canaries`) appends M canary coordinates to every model: the
gradient is computed on the p data coordinates, the agent's canaries of magnitude L₀/m_i (half its
l1 sensitivity 2L₀/m_i) follow it, the Laplace noise covers all p + M coordinates and update (6),
coordinate-wise linear, carries them along, so every broadcast is p + M long. The warm start is
another mechanism with another sensitivity: its release carries no canaries, only its Laplace
noise, in the canary coordinates. Non-private CD plants them too (no noise hides them: the audit
shows it). A restarted agent plants the signs its private log holds.

A killed agent restarted on its log folder (`netdp-node --resume`, `ProtocolSpec.resumable`) goes
on from what its view log holds (`node.agent_progress`): its ledger counts every logged spend, its
model is its last logged broadcast, its mailbox holds the neighbour models it had logged, and it
makes only the updates it has not used up (a propagation the crash interrupted is left
unfinished: it goes on with its updates). Its parameters are the published ones with its own
budget if it chose a lower one (`node.agent_budget`).
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from netdp.v1 import viewlog_pb2
from node import data
from node.agent_progress import AgentProgress, read_progress
from node.budget import BudgetExhausted, BudgetLedger, proportional_split, proposition2_shape
from node.delivery import LatestValueDelivery
from node.learning import LocalData, Task
from node.mailboxes.latest_value import Latest
from node.message import Message, MessageId
from node.personalized import AgentProblem
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec
from node.protocols.params import CANARIES_DESCRIPTION

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "personalized-cd"
MODEL = "model"  # the broadcast of an agent's model, sequence = its release count (warm start, then updates)
NOISE_PURPOSE = "gradient"  # the draw's step is the agent's wake-up index (its update's, after P propagation steps)
WARM_START_PURPOSE = "warm_start"  # the draw perturbing the local model, step 0, before any gradient draw
BudgetSplit = Literal["equal", "proposition2"]


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
    canaries: int = Field(0, ge=0, description=CANARIES_DESCRIPTION, exclude_if=lambda count: count == 0)
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
    budget_split: BudgetSplit = Field("equal", description="how an agent splits its budget over its T_i updates: "
                                      "equally, or by Prop. 2 (ε ∝ C^{t/3} at the expected global iteration t ≈ k n "
                                      "of its k-th wake-up, C = 1 − curvature_ratio / n)")
    curvature_ratio: float | None = Field(None, gt=0.0, le=1.0, description=(
        "σ/L_max of objective (2), for Prop. 2's C: its strong convexity σ over its largest block smoothness "
        "L_max = max_i D_ii (1 + μ c_i L_i^loc), which need every agent's m_i and so are not derived from the other "
        "parameters (the paper bounds the ratio below by μ min_i D_ii c_i σ_i^loc / max_i D_ii (1 + μ c_i L_i^loc), "
        "σ_i^loc = 2 λ_i); only with budget_split 'proposition2'"))
    warm_start_epsilon: float | None = Field(None, gt=0.0, description=(
        "ε_ws of the private warm start: every agent first releases its local model with Laplace noise, paid from "
        "its ε̄_i (its updates split the rest), and starts CD from it; none: CD starts from zeros"))
    warm_start_propagation: int = Field(0, ge=0, exclude_if=lambda steps: steps == 0, description=(
        "P: wake-ups of model propagation (AISTATS 2018 supplementary C, update (16)) every agent makes after its "
        "warm start, before its updates, smoothing the released noisy local models over the graph; post-processing "
        "of released models, it spends nothing; 0: CD starts from the agent's own warm start"))
    tick_rate: float = Field(20.0, gt=0.0, le=10_000.0, description="rate of every agent's Poisson clock, per second")
    alpha: float = Field(2.0, gt=1.0, description="Rényi order used in reports")

    @model_validator(mode="after")
    def _budgets(self) -> PersonalizedCDParams:
        nodes = [budget.node for budget in self.budgets]
        if self.epsilon is None and nodes:
            raise ValueError("per-agent budgets need a private run: set epsilon too")
        if len(set(nodes)) != len(nodes):
            raise ValueError("an agent is listed twice in budgets")
        if (self.budget_split == "proposition2") != (self.curvature_ratio is not None):
            raise ValueError("budget_split 'proposition2' goes with curvature_ratio, and only it")
        if self.budget_split != "equal" and not self.private:
            raise ValueError(f"budget_split {self.budget_split!r} needs a private run: set epsilon too")
        if self.warm_start_propagation and self.warm_start_epsilon is None:
            raise ValueError("warm_start_propagation smooths the private warm start: set warm_start_epsilon too")
        if self.warm_start_epsilon is not None:
            if self.epsilon is None:
                raise ValueError("a private warm start needs a private run: set epsilon too")
            smallest = min([self.epsilon, *(budget.epsilon for budget in self.budgets)])
            if self.warm_start_epsilon >= smallest:
                raise ValueError(f"warm_start_epsilon {self.warm_start_epsilon:g} leaves nothing for the updates "
                                 f"of an agent whose budget is {smallest:g}")
            if self.regularization == 0.0:
                raise ValueError("a private warm start needs lambda_i > 0: its sensitivity is L0 / (m_i lambda_i)")
        return self

    @property
    def vector_length(self) -> int:
        """Length of every model an agent broadcasts: the p data coordinates, then the canary coordinates."""
        return self.dimension + self.canaries

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

    @property
    def warm_start_releases(self) -> int:
        """1 when every agent releases a warm start (its release 0) before its updates, else 0."""
        return int(self.warm_start_epsilon is not None)

    @property
    def wakeups(self) -> int:
        """Wake-ups of an agent after its warm start: its P propagation steps, then its T_i updates."""
        return self.warm_start_propagation + self.updates

    @property
    def releases(self) -> int:
        """Models an agent broadcasts at most (sequences 1..releases): its warm start, its propagation steps, then its
        T_i updates."""
        return self.warm_start_releases + self.wakeups

    @property
    def spend_count(self) -> int:
        """Spends an agent logs at most: its warm start's and its T_i updates' (its propagation steps pay nothing)."""
        return self.warm_start_releases + self.updates

    def paid_release(self, sequence: int) -> int | None:
        """The index of the spend that pays for broadcast `sequence` (the warm start 0, update t then w + t); None for
        a propagation step, which spends nothing."""
        release = sequence - 1
        if release < self.warm_start_releases:
            return release
        if release < self.warm_start_releases + self.warm_start_propagation:
            return None
        return release - self.warm_start_propagation

    def paid_releases(self, sequence: int) -> int:
        """How many of an agent's broadcasts 1..sequence are paid for (its propagation steps are not)."""
        unpaid = min(max(0, sequence - self.warm_start_releases), self.warm_start_propagation)
        return sequence - unpaid

    def release_epsilons(self, node: int, n: int) -> tuple[float, ...] | None:
        """The ε of each of an agent's releases among n agents, in order; None in non-private CD."""
        budget = self.budget_of(node)
        if budget is None:
            return None
        return _release_epsilons(*budget, self.updates, self.budget_split, self.curvature_ratio, n,
                                 self.warm_start_epsilon)

    def step_epsilon(self, node: int, step: int, n: int) -> float | None:
        """The ε an agent's update `step` (from 0) spends among n agents; None in non-private CD."""
        epsilons = self.release_epsilons(node, n)
        return None if epsilons is None else epsilons[self.warm_start_releases + step]

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Three times the clock's expected time for T_i updates, and a broadcast deadline per release."""
        return self.releases * (3.0 / self.tick_rate + network.round_deadline_s)


@functools.lru_cache(maxsize=256)
def _release_epsilons(epsilon: float, delta: float, updates: int, split: BudgetSplit, curvature_ratio: float | None,
                      n: int, warm_start: float | None) -> tuple[float, ...]:
    """The warm start's ε (if any), then the updates' shares of what remains (cached: every agent asks)."""
    if split == "equal":
        shape = np.ones(updates)
    elif curvature_ratio is None:
        raise ValueError("budget_split 'proposition2' goes with curvature_ratio")
    else:
        shape = proposition2_shape(updates, n, curvature_ratio)
    first: tuple[float, ...] = () if warm_start is None else (warm_start,)
    return first + proportional_split(epsilon, delta, shape, first)


def check_topology(topology: Topology) -> None:
    """Every agent named in `budgets` is a node of the topology."""
    if not isinstance(topology.protocol, PersonalizedCDParams):
        raise ValueError(f"{PROTOCOL_NAME} checks its own topologies, not {topology.protocol_name}'s")
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

    def __init__(self, context: ProtocolContext[PersonalizedCDParams], local: LocalData) -> None:
        self._context = context
        params = context.params
        self._problem = AgentProblem.of(params, context.topology, context.node_id, local)
        self._models = context.latest_values(MODEL, last_sequence=params.releases)
        logged = context.journal.resumed  # a restarted agent's own view log, read back
        self._resumed = None if logged is None else read_progress(logged, MODEL)
        for sender, latest in () if self._resumed is None else self._resumed.received:
            self._models.recall(sender, latest)
        budget = params.budget_of(context.node_id)
        if budget is None:
            self._ledger = None
        elif self._resumed is None:
            self._ledger = BudgetLedger(context.journal, *budget)
        else:
            self._ledger = BudgetLedger.resumed(context.journal, *budget, self._resumed.spends)
        self._initial = np.zeros(params.vector_length)
        self._local = self._initial  # the agent's released warm start, which its propagation steps pull towards

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        if self._resumed is None:
            await context.wait_for_peers(context.neighbours(), context.network.startup_deadline_s)
            theta, wakeup = await self._start(), 0
        else:  # a restarted agent: its neighbours are long up, and it goes on where its log stops
            theta, wakeup = await self._go_on(self._resumed)
        clock = np.random.default_rng()  # the wake-up times are public: they need no secret randomness
        while wakeup < params.wakeups:
            await asyncio.sleep(clock.exponential(1.0 / (params.tick_rate * context.clock_speedup)))
            await context.step_started(wakeup)
            if wakeup < params.warm_start_propagation:
                theta = await self._propagate(wakeup)
            else:
                try:
                    theta = await self._update(theta, wakeup)
                except BudgetExhausted:
                    break
            await self._broadcast(theta, params.warm_start_releases + wakeup)
            wakeup += 1
        return NodeOutput(theta, max(0, wakeup - params.warm_start_propagation))

    async def _start(self) -> np.ndarray:
        """Θ_i(0): the public zeros, or the private warm start, paid for before it is broadcast as release 0."""
        context = self._context
        epsilon = context.params.warm_start_epsilon
        if epsilon is None:
            return self._initial
        local = self._initial.copy()  # no canaries: only the warm start's noise in their coordinates
        local[: context.params.dimension] = self._problem.local_model()
        scale, spent = context.noise.laplace_scale(self._problem.warm_start_sensitivity, epsilon)
        assert self._ledger is not None  # a warm start is private (the Params say so), so the agent has a budget
        await self._ledger.spend(0, spent)
        context.journal.private_input(local, False)
        theta = await context.noise.laplace(local, scale, step=0, purpose=WARM_START_PURPOSE)
        await self._broadcast(theta, 0)
        self._local = theta
        return theta

    async def _go_on(self, progress: AgentProgress) -> tuple[np.ndarray, int]:
        """A restarted agent's model and its next wake-up (each logged update spend uses one up).

        Its model is its last logged broadcast, or Θ_i(0) when it logged none; a warm start the crash
        came before paying for is made now; a propagation it interrupted is left unfinished.
        """
        params = self._context.params
        if len(progress.spends) < params.warm_start_releases:
            return await self._start(), 0
        model = self._initial if progress.model is None else progress.model
        updates = len(progress.spends) - params.warm_start_releases
        return model, max(progress.updates, params.warm_start_propagation + updates if params.warm_start_propagation
                          else updates)

    async def _broadcast(self, theta: np.ndarray, release: int) -> None:
        """Send a released model to every neighbour, one way (sequence = release index + 1)."""
        context = self._context
        await context.broadcast(context.neighbours(), Message(MODEL, MessageId(sequence=release + 1), theta),
                                LatestValueDelivery(), context.network.round_deadline_s)

    async def _propagate(self, wakeup: int) -> np.ndarray:
        """Propagation step (16): the agent's released warm start and its neighbours' latest broadcasts, averaged by
        the graph; no data, noise or spend (released models only), the inputs logged as an update's are."""
        inputs = self._models.snapshot()
        await self._context.journal.write(inputs_record(wakeup, inputs))
        neighbours = {peer: inputs[peer].value if peer in inputs else self._initial for peer in self._problem.weights}
        return self._problem.propagate(self._local, neighbours)

    async def _update(self, theta: np.ndarray, wakeup: int) -> np.ndarray:
        """Update (6) at this wake-up; in the private variant the spend is logged before the noise is drawn.

        The gradient reads the data coordinates only, so the canary coordinates never reach the data ones."""
        context, params, problem = self._context, self._context.params, self._problem
        step = wakeup - params.warm_start_propagation  # the update's index, which picks its share of the budget
        inputs = self._models.snapshot()
        gradient, clipped = problem.gradient(theta[: params.dimension], context.clip_bound(params.lipschitz))
        if self._ledger is None:
            await context.journal.write(inputs_record(wakeup, inputs))
            noisy = await context.contribution(gradient, clipped > 0, sensitivity=problem.sensitivity)
        else:
            epsilon = params.step_epsilon(context.node_id, step, context.topology.n)
            assert epsilon is not None  # an agent with a budget is in a private run
            scale, spent = context.noise.laplace_scale(problem.sensitivity, epsilon)
            await self._ledger.spend(params.warm_start_releases + step, spent,
                                     alongside=(inputs_record(wakeup, inputs),))
            contribution = await context.contribution(gradient, clipped > 0, sensitivity=problem.sensitivity)
            noisy = await context.noise.laplace(contribution, scale, step=wakeup, purpose=NOISE_PURPOSE)
        neighbours = {peer: inputs[peer].value if peer in inputs else self._initial for peer in problem.weights}
        return problem.update(theta, neighbours, noisy)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, PersonalizedCDParams, PersonalizedCDNode, load=load_agent_data, resumable=True,
                 check_graph=check_topology, gaussian=False),
    auditor="coordinator_tools.audit.protocols.personalized_cd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:PERSONALIZED_CD",
    demo="coordinator_tools.cluster.demo_protocols:PERSONALIZED_CD",
)
