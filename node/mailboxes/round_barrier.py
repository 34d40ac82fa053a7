"""Per-neighbourhood round barrier: collects the neighbours' values round by round.

There is no global clock. A node collecting round t accepts values for rounds t..t+window
(a neighbour may be one round ahead), refuses older rounds (already closed) and anything
further ahead. A value is either logged as received *and* used, or refused: never logged
and then ignored. Accepting reserves the value's place (`take`, without waiting), logs it
(alone, or with the other messages of its bundle: one group commit), then stores it; a round
does not close while a value of it is being logged.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from node.journal import Delivery, Journal, received_record
from node.mailboxes.liveness import Liveness, LivenessWatch
from node.mailboxes.quick_path import Taken
from node.message import GOSSIP, Message, MessageId
from node.refusal import Refusal


@dataclass
class NeighbourFates:
    """What this round's own sends proved about the neighbours, filled in as they finish."""

    alive: set[int] = field(default_factory=set)  # acknowledged our value: alive, perhaps slow
    unreachable: set[int] = field(default_factory=set)  # no connection: our value could not be delivered
    moved_on: set[int] = field(default_factory=set)  # refused our value: it had closed the round already

    def record(self, peer: int, delivery: Delivery) -> bool:
        """File the fate of our message to `peer`; False if it says nothing about the peer's own value."""
        if delivery.delivered:
            self.alive.add(peer)
        elif delivery.unreachable:
            self.unreachable.add(peer)
        elif delivery.peer_moved_on:
            self.moved_on.add(peer)
        else:
            return False
        return True

    def mark_dead(self, peer: int) -> None:
        """A peer that acknowledged earlier but no longer answers at all."""
        self.alive.discard(peer)
        self.unreachable.add(peer)


class RoundBarrier:
    """Values received per round from that round's neighbours (fixed, or those of the round's step graph)."""

    def __init__(self, neighbours_of_round: Callable[[int], tuple[int, ...]], journal: Journal, *,
                 window: int = 1) -> None:
        self._neighbours_of_round = neighbours_of_round
        self._journal = journal
        self._window = window
        self._open_round = 0
        self._values: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
        self._logging: dict[int, set[int]] = defaultdict(set)  # round -> senders whose value is being logged
        self._used: set[tuple[int, int]] = set()  # (sender, round) of every value a closed round used
        self._changed: asyncio.Future[None] | None = None  # what the collector waits on; set when anything changes
        self._neighbour_sets: dict[int, frozenset[int]] = {}  # round -> its neighbours, looked up once per round

    @property
    def open_round(self) -> int:
        """The lowest round still accepting values."""
        return self._open_round

    async def handle(self, sender: int, message: Message) -> None:
        """The mailbox's handler: log and store a neighbour's round value, or raise Refusal untouched."""
        taken = self.take(sender, message)
        logged = False
        try:
            await self._journal.received(sender, message)  # what `taken.records` holds
            logged = True
        finally:
            taken.settle(logged)

    async def deliver(self, sender: int, round_index: int, value: np.ndarray) -> None:
        """Log and store a neighbour's value, or raise Refusal without touching any state."""
        await self.handle(sender, Message(GOSSIP, MessageId(round=round_index), value))

    def take(self, sender: int, message: Message) -> Taken:
        """Reserve the value's place (raise Refusal, untouched, if it has none): its record is to be logged, then
        `settle` stores it."""
        round_index = message.id.round
        if (sender in self._values.get(round_index, {}) or sender in self._logging.get(round_index, ())
                or (sender, round_index) in self._used):
            raise Refusal("ALREADY_EXISTS", f"already have round {round_index} from node {sender}",
                          names_sender=True)
        if round_index < self._open_round:
            # Only a sender that was dropped hears this: it tells it not to wait for this node.
            raise Refusal("FAILED_PRECONDITION", f"round {round_index} is closed (now at {self._open_round}) "
                          f"and node {sender} was dropped from it", names_sender=True)
        if round_index > self._open_round + self._window:
            raise Refusal("OUT_OF_RANGE", f"round {round_index} is too far ahead (now at {self._open_round})")
        if sender not in self._neighbour_set(round_index):
            raise Refusal("PERMISSION_DENIED", f"node {sender} is not a neighbour in round {round_index}",
                          names_sender=True)
        self._logging[round_index].add(sender)
        return Taken((received_record(sender, message),), partial(self._settle, sender, message))

    def _neighbour_set(self, round_index: int) -> frozenset[int]:
        """The round's neighbours as a set (the schedule is fixed: each round's is read once)."""
        neighbours = self._neighbour_sets.get(round_index)
        if neighbours is None:
            neighbours = self._neighbour_sets[round_index] = frozenset(self._neighbours_of_round(round_index))
        return neighbours

    def _settle(self, sender: int, message: Message, logged: bool) -> None:
        """The value's record is durable (`logged`): store it; or it could not be written: free its place."""
        round_index = message.id.round
        logging = self._logging[round_index]
        logging.discard(sender)
        if logged:
            self._values[round_index][sender] = message.payload
        if round_index == self._open_round and not logging:  # the collector decides only on its round's values,
            self._notify()  # and only once none is on its way to disk: one wake per commit, not per value

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def _changes(self) -> None:
        """Return at the next change (a value stored or freed, a wake)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        await self._changed

    def _file_dead(self, fates: NeighbourFates, dead: set[int]) -> None:
        """Neighbours that acknowledged our value and no longer answer at all: not waited for any more."""
        for peer in dead:
            fates.mark_dead(peer)
        self._notify()

    async def wake(self) -> None:
        """Re-evaluate the waiting collector (e.g. a neighbour's liveness just became known)."""
        self._notify()

    async def collect(self, round_index: int, deadline_s: float, *, patience_s: float,
                      fates: NeighbourFates, liveness: Liveness | None = None) -> dict[int, np.ndarray]:
        """Wait for every neighbour's value for the round, then close the round.

        A neighbour our own value could not reach is not waited for: it is dead or cut off,
        and waiting a deadline for it every round would stall the whole run. (If no
        neighbour is reachable, this node is more likely the one cut off: it waits as usual,
        so that it is still in step when the network comes back.) Nor is a neighbour that
        closed the round without our value: it is ahead, so this node hurries to catch up. Any other
        missing neighbour is dropped once the deadline has passed, unless it acknowledged
        our value for this round (it is alive, only slow: perhaps itself waiting for a dead
        neighbour); those are waited for up to `patience_s`, unless `liveness` finds that one no
        longer answers at all (it died after acknowledging): that one is dropped at once. Without this, one dead node
        would make its neighbours late and their other neighbours drop them in turn. Later
        values for a closed round are refused; dropped neighbours are logged.
        """
        if round_index != self._open_round:
            raise RuntimeError(f"collecting round {round_index} while round {self._open_round} is open")
        started = asyncio.get_running_loop().time()
        watch = None if liveness is None else LivenessWatch(
            lambda: [peer for peer in fates.alive if peer not in self._values.get(round_index, {})], liveness,
            partial(self._file_dead, fates))
        try:
            return await self._close_round(round_index, deadline_s, patience_s, fates, started)
        finally:
            if watch is not None:
                watch.stop()

    async def _close_round(self, round_index: int, deadline_s: float, patience_s: float, fates: NeighbourFates,
                           started: float) -> dict[int, np.ndarray]:
        loop = asyncio.get_running_loop()
        neighbours = self._neighbours_of_round(round_index)
        # One timer for the round, not one per wake: it only wakes the collector, which reads the clock
        # itself, so a timer that fires a little early just gets armed again for the same moment.
        # (Waiting on a future, not wait_for: on Python 3.11 wait_for can swallow a cancellation
        # (SIGTERM) that arrives as the barrier is woken, and the node would run on.)
        timer: asyncio.TimerHandle | None = None

        def due() -> None:
            nonlocal timer
            timer = None
            self._notify()

        try:
            while True:
                cut_off = fates.unreachable.issuperset(neighbours)
                awaited = {peer for peer in neighbours if peer not in self._values[round_index]
                           and peer not in fates.moved_on and (cut_off or peer not in fates.unreachable)}
                elapsed = loop.time() - started
                logging = self._logging.get(round_index)
                if logging:  # a value of this round is on its way to disk: it is in the round
                    await self._changes()
                    continue
                if not awaited or elapsed >= patience_s:
                    break
                if elapsed >= deadline_s and not awaited & fates.alive:
                    break
                wake_at = started + (deadline_s if elapsed < deadline_s else patience_s)
                if timer is None or timer.when() != wake_at:
                    if timer is not None:
                        timer.cancel()
                    timer = loop.call_at(wake_at, due)
                await self._changes()
        finally:
            if timer is not None:
                timer.cancel()
        # Closed at once, with no wait between the last check and here: no value can slip in unused.
        values = self._values.pop(round_index, {})  # none arrived: perhaps no neighbour this step
        self._logging.pop(round_index, None)
        self._neighbour_sets.pop(round_index, None)  # a closed round takes no value any more
        self._used.update((sender, round_index) for sender in values)
        self._open_round = round_index + 1
        waited = loop.time() - started
        for peer in neighbours:
            if peer not in values:
                await self._journal.drop_out(peer, round_index, f"no value after {waited:.3g} s")
        return values
