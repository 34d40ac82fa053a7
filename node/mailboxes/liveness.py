"""Liveness checks of a round barrier's neighbours: is one we wait for still there at all?

A neighbour that acknowledged our value but whose own value is missing is alive, perhaps slow,
and the barrier waits for it well past the deadline. If it died since (SIGKILL, host gone) it
must be dropped at once, not after that patience: every PROBE_INTERVAL_S while a round is
collected, such neighbours are checked. The ids of this process are answered at once by their
node (they live exactly as long as it); only those elsewhere are pinged, in a task.

The checks of every barrier of an event loop share one timer (`LivenessChecks`): a process of
thousands of ids keeps one timer for them, not one each re-armed every interval (a virtual run's
timer heap would otherwise hold a few thousand of them, each push and pop comparing a dozen).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

PROBE_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Liveness:
    """How a barrier learns that a neighbour died.

    `here(peers)` answers at once for the ids of this process: (those of them that stopped, the
    peers it cannot tell about). `ask(peers)` pings those others: the ones that do not answer at
    all (dead or cut off).
    """

    here: Callable[[Sequence[int]], tuple[set[int], list[int]]]
    ask: Callable[[Sequence[int]], Awaitable[set[int]]]


class LivenessWatch:
    """One round's checks: the waited-for neighbours that acknowledged, checked for life at least PROBE_INTERVAL_S
    apart (the first that long after the round started); `on_dead` hears of the dead ones."""

    def __init__(self, waiting: Callable[[], list[int]], liveness: Liveness,
                 on_dead: Callable[[set[int]], None]) -> None:
        self._waiting = waiting
        self._liveness = liveness
        self._on_dead = on_dead
        self._checks = liveness_checks()
        self._due = self._checks.now() + PROBE_INTERVAL_S
        self._asking: asyncio.Task[None] | None = None
        self._checks.add(self)

    def stop(self) -> None:
        """The round closed: no more checks, and pings in flight are abandoned."""
        self._checks.discard(self)
        if self._asking is not None:
            self._asking.cancel()

    def check_if_due(self, now: float) -> None:
        """Check now if the last check (or the start) is PROBE_INTERVAL_S ago and no ping is in flight."""
        if self._asking is not None or now < self._due:
            return
        stopped, elsewhere = self._liveness.here(self._waiting())
        self._file(stopped)
        if elsewhere:
            self._asking = asyncio.get_running_loop().create_task(self._ask(elsewhere))
        else:
            self._due = now + PROBE_INTERVAL_S

    async def _ask(self, peers: list[int]) -> None:
        self._file(await self._liveness.ask(peers))
        self._asking = None
        self._due = self._checks.now() + PROBE_INTERVAL_S

    def _file(self, dead: set[int]) -> None:
        if dead:
            self._on_dead(dead)


class LivenessChecks:
    """The liveness watches of one event loop, checked on one timer every PROBE_INTERVAL_S while there are any."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._watches: dict[LivenessWatch, None] = {}  # in the order they started
        self._timer: asyncio.TimerHandle | None = None

    def now(self) -> float:
        return self._loop.time()

    def add(self, watch: LivenessWatch) -> None:
        self._watches[watch] = None
        if self._timer is None:
            self._timer = self._loop.call_later(PROBE_INTERVAL_S, self._tick)

    def discard(self, watch: LivenessWatch) -> None:
        self._watches.pop(watch, None)

    def _tick(self) -> None:
        now = self._loop.time()
        for watch in list(self._watches):
            watch.check_if_due(now)
        self._timer = self._loop.call_later(PROBE_INTERVAL_S, self._tick) if self._watches else None


_checks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LivenessChecks] = weakref.WeakKeyDictionary()


def liveness_checks() -> LivenessChecks:
    """The running event loop's liveness checks, shared by every round barrier on it."""
    loop = asyncio.get_running_loop()
    checks = _checks.get(loop)
    if checks is None:
        checks = _checks[loop] = LivenessChecks(loop)
    return checks
