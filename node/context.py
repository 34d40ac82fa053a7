"""What a protocol sees of its node: a small, transport-free interface.

A protocol module gets a `ProtocolContext` and nothing else: its id and public
parameters, its noise (drawn from the node's own sampler, every draw logged privately
with its step and purpose), `neighbours(step)`, mailboxes for the message patterns it
uses, and the verbs `deliver` (returns once the receiver durably logged the message),
`broadcast` and `call` (request/reply). gRPC, TLS, retries and the log format stay behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Generic, Literal, TypeVar, cast, overload

import numpy as np

from node.breaks import LEAK, Breaks
from node.canaries import Canaries, canary_magnitude
from node.delivery import CustodyDelivery, DeliveryPolicy, FateCallback, Outbox
from node.journal import Delivery, Journal
from node.mailboxes import exchange_desk as kinds
from node.mailboxes.exchange_desk import ExchangeDesk
from node.mailboxes.latest_value import LatestValues
from node.mailboxes.round_barrier import RoundBarrier
from node.mailboxes.token_slot import AdmitRule, TokenSlot
from node.message import GOSSIP, IdScheme, Message, MessageId
from node.noise import GaussianSampler, LaplaceSampler, RandomizedResponseSampler, SamplerKind
from node.receiver import Handler, KindRule, NamedHandler, Receiver
from node.topology import NetworkParams, Topology

P = TypeVar("P", covariant=True)  # the protocol's Params: what `params` is
LAPLACE_CALIBRATION_TRIES = 8  # widenings of a Laplace scale before a sampler's grid is declared out of reach


class NodeNoise:
    """The node's own noise: drawn from its samplers, each draw logged privately, never sent as such.

    `broken_scale` (a negative control, `node.breaks`) draws the Gaussian and Laplace noise at that
    multiple of the scale asked for, while the private log records the scale asked for.
    """

    def __init__(self, sampler: GaussianSampler, journal: Journal,
                 randomized_response: RandomizedResponseSampler | None = None,
                 laplace: LaplaceSampler | None = None, *, broken_scale: float = 1.0) -> None:
        self._sampler = sampler
        self._journal = journal
        self._randomized_response = randomized_response
        self._laplace = laplace
        self._broken_scale = broken_scale

    @property
    def kind(self) -> SamplerKind:
        """Whether this node's randomness is secure or a reproducible simulation (its Gaussian sampler's kind)."""
        return self._sampler.kind

    async def gaussian(self, value: np.ndarray, sigma: float, *, step: int, purpose: str) -> np.ndarray:
        """value + N(0, σ² I), with the draw logged to the private log under (step, purpose)."""
        noisy = self._sampler.perturb(value, sigma * self._broken_scale)
        self._journal.noise(purpose, noisy - value, step=step, mechanism="gaussian", scale=sigma)
        return noisy

    def laplace_scale(self, sensitivity: float, epsilon: float) -> tuple[float, float]:
        """The Laplace scale b = Δ/ε, widened until this node's sampler (its grid included) is ε-DP at l1
        sensitivity Δ; and the ε that scale really gives, which is what the node must account."""
        sampler = self._laplace_sampler()
        scale = sensitivity / epsilon
        for _ in range(LAPLACE_CALIBRATION_TRIES):
            spent = sampler.effective_sensitivity(sensitivity, scale) / scale
            if spent <= epsilon:
                return scale, spent
            scale *= spent / epsilon
        raise ValueError(f"the {sampler.kind} Laplace sampler does not reach epsilon {epsilon:g} at "
                         f"sensitivity {sensitivity:g}")

    async def laplace(self, value: np.ndarray, scale: float, *, step: int, purpose: str) -> np.ndarray:
        """value + i.i.d. Laplace(scale) noise, with the draw logged to the private log under (step, purpose)."""
        noisy = self._laplace_sampler().perturb(value, scale * self._broken_scale)
        self._journal.noise(purpose, noisy - value, step=step, mechanism="laplace", scale=scale)
        return noisy

    def _laplace_sampler(self) -> LaplaceSampler:
        if self._laplace is None:
            raise ValueError("this node was started without a Laplace sampler")
        return self._laplace

    async def randomized_response(self, value: int, categories: int, epsilon: float, *, step: int,
                                  purpose: str) -> int:
        """ε-randomized response over 0..L−1 (ε = 0: a uniform draw, whatever `value`); the draw is logged
        privately under (step, purpose) as e_answer − e_value, the change it makes to a histogram."""
        if self._randomized_response is None:
            raise ValueError("this node was started without a randomized-response sampler")
        answer = self._randomized_response.respond(value, categories, epsilon)
        change = np.zeros(categories)
        change[answer] += 1.0
        change[value] -= 1.0
        self._journal.noise(purpose, change, step=step, mechanism="randomized_response", scale=epsilon)
        return answer

    async def uniform_histogram(self, categories: int, count: int, *, step: int, purpose: str) -> np.ndarray:
        """The counts of `count` uniform draws from 0..L−1 (randomized response at ε = 0, so from the same
        sampler), logged privately as one draw under (step, purpose)."""
        if self._randomized_response is None:
            raise ValueError("this node was started without a randomized-response sampler")
        counts = np.zeros(categories)
        for _ in range(count):
            counts[self._randomized_response.respond(0, categories, 0.0)] += 1.0
        self._journal.noise(purpose, counts, step=step, mechanism="uniform", scale=float(count))
        return counts


class ProtocolContext(Generic[P]):
    """One node's interface to the network, its noise and its log, as a protocol uses them (`P`: its Params)."""

    def __init__(self, topology: Topology, node_id: int, journal: Journal, receiver: Receiver, outbox: Outbox,
                 noise: NodeNoise, on_step: Callable[[int], Awaitable[None]], network: NetworkParams | None = None,
                 params: P | None = None, *, clock_speedup: float = 1.0, canaries: Canaries | None = None,
                 breaks: Breaks = Breaks()) -> None:
        """`params`: this node's own public parameters if not the published ones (an agent's lower budget);
        `clock_speedup`: fault injection, the factor by which this node's Poisson clock outruns the published rate;
        `canaries`: the node's secret canary signs in an audit run; `breaks`: its deliberate bugs (negative
        controls)."""
        self.topology = topology
        self.clock_speedup = clock_speedup
        self.canaries = canaries or Canaries(np.zeros(0))
        self.breaks = breaks
        self._canaries_logged = self.canaries.logged
        # The published Params are the P of the spec the topology's protocol registered (the topology checked them).
        self._params = cast(P, topology.protocol) if params is None else params
        self._network = network or topology.network
        self.node_id = node_id
        self.journal = journal
        self.noise = noise
        self._receiver = receiver
        self._outbox = outbox
        self._on_step = on_step

    @property
    def params(self) -> P:
        """The protocol's public parameters (its Params model from the topology, or this node's own)."""
        return self._params

    @property
    def network(self) -> NetworkParams:
        """The deadlines and delivery limits this node keeps: the published ones, unless its host stretched them."""
        return self._network

    def neighbours(self, step: int = 0) -> tuple[int, ...]:
        """This node's neighbours at `step` (the same every step on a fixed graph)."""
        return self.topology.neighbours_at(self.node_id, step)

    async def step_started(self, step: int) -> None:
        """Tell the host a local step begins (progress, and fault injection at a chosen step)."""
        await self._on_step(step)

    async def private_input(self, value: np.ndarray, clipped: bool) -> None:
        """Log the node's own input to its private log as it is (one that carries no canaries: a category)."""
        self.journal.private_input(value, clipped)

    def clip_bound(self, bound: float) -> float:
        """The bound to clip an input or gradient to: `bound`, unless this node deliberately skips clipping."""
        return self.breaks.clip_bound(bound)

    async def contribution(self, value: np.ndarray, clipped: bool, *, sensitivity: float) -> np.ndarray:
        """The node's clipped input (or step gradient) as it enters the protocol, logged privately.

        In an audit run the canary coordinates follow the data ones (`node.canaries`; their signs
        go to the private log before the first contribution carries them). A leak-raw node sends
        the result to every neighbour once, before any noise (`node.breaks`).
        """
        full = self.canaries.planted(value, sensitivity)
        if self.canaries.count and not self._canaries_logged:
            self.journal.canaries(self.canaries.signs, canary_magnitude(sensitivity))
            self._canaries_logged = True
        self.journal.private_input(full, clipped)
        if self.breaks.leak_raw:
            self.breaks = replace(self.breaks, leak_raw=False)  # one extra value, not one per contribution
            await self.broadcast(self.neighbours(), Message(LEAK, MessageId(), full),
                                 CustodyDelivery(self.network.send_attempts), self.network.round_deadline_s)
        return full

    # --- mailboxes ---------------------------------------------------------------------------

    @overload
    def on(self, kind: str, handler: NamedHandler, *, scheme: IdScheme, payload: bool,
           anonymous: Literal[False] = False, call_only: bool = False,
           senders: Collection[int] | None = None) -> None: ...

    @overload
    def on(self, kind: str, handler: Handler, *, scheme: IdScheme, payload: bool, anonymous: bool,
           call_only: bool = False, senders: Collection[int] | None = None) -> None: ...

    def on(self, kind: str, handler: Handler | NamedHandler, *, scheme: IdScheme, payload: bool,
           anonymous: bool = False, call_only: bool = False, senders: Collection[int] | None = None) -> None:
        """Take incoming messages of `kind` with `handler` (validated first, like every message);
        `anonymous`: the handler and the log never learn who sent them (it is handed None as the sender);
        `call_only`: a request, refused when it comes one-way; `senders`: the nodes that may send the kind,
        if not the neighbours (a key agreement between nodes that share a neighbour)."""
        self._receiver.add_rule(kind, KindRule(handler, scheme, payload, anonymous, call_only,
                                               None if senders is None else frozenset(senders)))

    def round_barrier(self, kind: str = GOSSIP, *, rounds_per_step: int = 1) -> RoundBarrier:
        """A per-neighbourhood round barrier fed by messages of `kind`; round r runs on step r // rounds_per_step's
        graph."""
        barrier = RoundBarrier(lambda round_index: self.neighbours(round_index // rounds_per_step), self.journal)
        # Its values also have the quick path of a bundle (validated, logged with the bundle's, then stored).
        self._receiver.add_rule(kind, KindRule(barrier.handle, "round", True, take=barrier.take))
        return barrier

    def exchange_desk(self, combine: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                      timeout_s: float) -> ExchangeDesk:
        """A desk for atomic pairwise exchanges (its handlers are registered here; `open` it with a value)."""
        desk = ExchangeDesk(self.node_id, combine, self.journal, self._outbox, timeout_s=timeout_s,
                            attempts=self.network.send_attempts)
        self.on(kinds.PROPOSE, desk.on_propose, scheme="exchange", payload=False, call_only=True)
        self.on(kinds.COMMIT, desk.on_commit, scheme="exchange", payload=True)
        self.on(kinds.ABORT, desk.on_abort, scheme="exchange", payload=False)
        self.on(kinds.STATUS, desk.answer_status, scheme="exchange", payload=False, call_only=True)
        return desk

    def latest_values(self, kind: str, *, last_sequence: int) -> LatestValues:
        """The newest value per neighbour, fed by its broadcasts of `kind` (each with a sequence number, at most
        `last_sequence`, the published number of broadcasts)."""
        mailbox = LatestValues(self.journal, last_sequence=last_sequence)
        self.on(kind, mailbox.handle, scheme="sequence", payload=True)
        return mailbox

    def token_slot(self, kind: str, *, anonymous: bool = False, admit: AdmitRule | None = None) -> TokenSlot:
        """Custody of the tokens of `kind` walking through this node; `anonymous`: a sender-anonymous view;
        `admit`: the protocol's rule for which sender may pass which hop (it raises Refusal)."""
        slot = TokenSlot(kind, self.journal, self._outbox, attempts=self.network.send_attempts, admit=admit)
        self.on(kind, slot.handle, scheme="hop", payload=True, anonymous=anonymous)
        return slot

    # --- verbs -------------------------------------------------------------------------------

    async def deliver(self, to: int, message: Message, policy: DeliveryPolicy, budget_s: float, *,
                      wait_for_peer: bool = False) -> Delivery:
        """Deliver one message; the result says whether the receiver durably logged it."""
        return await self._outbox.deliver(to, message, policy, budget_s, wait_for_peer=wait_for_peer)

    async def broadcast(self, to: Sequence[int], message: Message, policy: DeliveryPolicy, budget_s: float, *,
                        wait_for_peer: bool = False, on_fate: FateCallback | None = None) -> dict[int, Delivery]:
        """Deliver one message to several peers at once; fates are reported as they are known."""
        return await self._outbox.broadcast(to, message, policy, budget_s, wait_for_peer=wait_for_peer,
                                            on_fate=on_fate)

    async def send_each(self, messages: Mapping[int, Message], policy: DeliveryPolicy, budget_s: float, *,
                        wait_for_peer: bool = False, on_fate: FateCallback | None = None) -> dict[int, Delivery]:
        """Deliver each peer its own message at once (a round value that differs per receiver, like a
        zero-sum share); fates are reported as they are known, each message logged with its fate."""
        sent = await asyncio.gather(*(self._outbox.broadcast((peer,), message, policy, budget_s,
                                                             wait_for_peer=wait_for_peer, on_fate=on_fate)
                                      for peer, message in sorted(messages.items())))
        return {peer: delivery for deliveries in sent for peer, delivery in deliveries.items()}

    async def call(self, to: int, message: Message, timeout_s: float) -> Message:
        """A request and the peer's reply (raises node.transport.base.LinkError on failure)."""
        return await self._outbox.call(to, message, timeout_s)

    async def reachable(self, peer: int, timeout_s: float) -> bool:
        """Whether the peer answers at all right now (a dead or cut-off peer does not)."""
        return await self._outbox.reachable(peer, timeout_s)

    async def silent(self, peers: Sequence[int], timeout_s: float) -> set[int]:
        """The peers that do not answer at all right now (dead or cut off)."""
        return await self._outbox.silent(peers, timeout_s)

    def silent_here(self, peers: Sequence[int]) -> tuple[set[int], list[int]]:
        """Without asking anyone: the peers hosted in this process that stopped, and those a ping must ask."""
        return self._outbox.silent_here(peers)

    async def wait_for_peers(self, peers: Sequence[int], timeout_s: float) -> set[int]:
        """Wait until each peer is up (peers start at different times); return those that came up."""
        answers = await asyncio.gather(*(self._outbox.reachable(peer, timeout_s, wait_for_peer=True)
                                         for peer in peers))
        return {peer for peer, up in zip(peers, answers) if up}
