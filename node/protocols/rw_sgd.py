"""Random-walk DP-SGD (ICML 2024 Alg. 1) on any published graph: the model walks, one noisy step per visit.

The token is the model θ (token id "model"), zeros at node 0. Its holder at hop t (t steps so
far) takes step t: its clipped step gradient g on its own data (the whole local set, or its next
minibatch taken cyclically), plus η ~ N(0, σ² I) from its own sampler (logged privately under
the node's visit index), θ ← θ − γ(g + η). Past its contribution cap N_max (Remark 5) a node
adds the noise alone, θ ← θ − γη, and logs no gradient. It then draws the next holder from its
row of the published transition matrix W (the topology's weights, Metropolis by default, whose
self-loop keeps the token here with probability W_vv) with the OS CSPRNG, and hands the model on
with a custody delivery; a neighbour that cannot take it is left out and the row drawn again.

After T steps the holder keeps θ_T as its output and takes its leave (`Farewell`: `over` to every
neighbour, no payload); a node that hears it stops waiting for the model and takes its leave in
turn, so the notice floods the graph (which may be sparse: a node only talks to its neighbours).
Every node's output is the last model it held (zeros if the walk never came): θ_T goes to its
last holder only, so the views stay the paper's (Eq. 7).

Views. Sender-known (the default): the receiver logs who handed it the model, which gRPC's
mutual TLS tells it anyway. Sender-anonymous (`sender: anonymous`): the model's kind is
registered anonymous, so the receiver checks the caller's certificate and neighbourhood, then
drops its id: the protocol, the token slot and every record of the kind, taken or refused, never
hold it. The end notice still names its relaying neighbour; it carries nothing of the model.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.learning import LocalData, clipped_gradient, load_local_data
from node.message import MessageId
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec
from node.protocols.params import LearningParams
from node.protocols.token_sum import TOKEN, Deadline, Farewell, TokenWalkError, hand_on_drawn
from node.refusal import Refusal

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.mailboxes.token_slot import Token
    from node.topology import NetworkParams

PROTOCOL_NAME = "rw-sgd"
MODEL_TOKEN_ID = "model"
START = 0  # the node the model starts at (public)
NOISE_PURPOSE = "gradient"  # the draw's step is the node's visit index
SenderView = Literal["known", "anonymous"]


class RwSgdParams(LearningParams):
    """Public parameters of random-walk DP-SGD (ICML 2024 Alg. 1)."""

    name: Literal["rw-sgd"] = "rw-sgd"
    steps: int = Field(ge=1, description="T: steps of the walk, one noisy gradient step each")
    contribution_cap: int | None = Field(None, ge=1, description="N_max: gradient steps a node takes at most; "
                                                                  "later visits add noise only (Remark 5)")
    sender: SenderView = Field("known", description="whether a receiver learns who handed it the model")

    def hops(self, n: int) -> int:
        """Hand-overs a run's deadlines allow: T steps, then the end notice across at most n − 1 relays."""
        return self.steps + n

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Twice the round deadlines of every hop (the launcher adds the startup deadline)."""
        return 2 * self.hops(n) * network.round_deadline_s

    def contributes(self, visit: int) -> bool:
        """Whether a node's visit (0-based) bears its gradient, or only noise past the cap."""
        return self.contribution_cap is None or visit < self.contribution_cap


class RwSgdNode:
    """One node's part: a noisy step at each visit of the model, then the end notice."""

    def __init__(self, context: ProtocolContext[RwSgdParams], local: LocalData) -> None:
        self._context = context
        self._data = local
        self._slot = context.token_slot(TOKEN, anonymous=context.params.sender == "anonymous", admit=self._admit)
        self._farewell = Farewell(context)  # its first notice also ends the wait for the model

    def _admit(self, sender: int | None, message_id: MessageId) -> None:
        steps = self._context.params.steps
        if message_id.token_id != MODEL_TOKEN_ID or message_id.hop >= steps:
            raise Refusal("FAILED_PRECONDITION", f"hop {message_id.hop} of token {message_id.token_id[:16]!r} is "
                                                 f"not part of this walk of {steps} steps")

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        deadline = Deadline.for_run(params, context.network, context.topology.n)
        await context.step_started(0)
        model, held, visits, passes = np.zeros(params.vector_length), None, 0, 0
        if context.node_id == START:
            await context.wait_for_peers(context.neighbours(), context.network.startup_deadline_s)
            held = self._slot.originate(MODEL_TOKEN_ID, model)
        while True:
            if held is None:
                held = await self._next_visit(deadline)
                if held is None:
                    break
            model = await self._step(held.value, visits)
            visits += 1
            if held.hop == params.steps - 1:
                break
            held = await hand_on_drawn(self._slot, held, model, self._row(), holder=context.node_id,
                                       budget_s=context.network.round_deadline_s, reachable=context.reachable,
                                       walk_over=self._farewell.came.is_set, deadline=deadline)
            if held is None:
                passes += 1
                await context.step_started(passes)
        await self._farewell.part(deadline)
        return NodeOutput(model, visits)

    async def _step(self, model: np.ndarray, visit: int) -> np.ndarray:
        """θ − γ(g + η) with this node's gradient, or θ − γη past its cap; the draw is logged privately."""
        context, params = self._context, self._context.params
        gradient = np.zeros(params.vector_length)
        if params.contributes(visit):
            x, y = self._data.batch(visit, params.batch)
            step = clipped_gradient(params.task, model[: params.dimension], x, y,
                                    clip=context.clip_bound(params.clip), regularization=params.regularization)
            gradient = await context.contribution(step.value, step.clipped > 0, sensitivity=params.sensitivity)
        noisy = await context.noise.gaussian(gradient, params.sigma, step=visit, purpose=NOISE_PURPOSE)
        return model - params.learning_rate * noisy

    def _row(self) -> dict[int, float]:
        """This node's row of the transition matrix: its neighbours' probabilities and its self-loop's."""
        return self._context.topology.transition_row(self._context.node_id)

    async def _next_visit(self, deadline: Deadline) -> Token | None:
        """The model's next visit here, or None once the end notice came."""
        arrival = asyncio.create_task(self._slot.take(deadline.remaining()))
        notice = asyncio.create_task(self._farewell.came.wait())
        try:
            await asyncio.wait((arrival, notice), return_when=asyncio.FIRST_COMPLETED)
        finally:
            arrival.cancel()
            notice.cancel()
        if self._farewell.came.is_set():
            return None
        token = arrival.result()
        if token is None:
            raise TokenWalkError(f"neither the model nor the end notice came within the run deadline "
                                 f"({deadline.seconds:g} s after this node started): its holder stopped")
        return token


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, RwSgdParams, RwSgdNode, load=load_local_data),
    auditor="coordinator_tools.audit.protocols.rw_sgd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:RW_SGD",
    demo="coordinator_tools.cluster.demo_protocols:RW_SGD",
)
