"""A process-wide, bounded pool of open append-only log file descriptors.

A networked node keeps two logs, so both stay open for the whole run, exactly as if each
writer held its own descriptor. A process that hosts many virtual nodes (`netdp run
--virtual`) has two logs per node: the pool keeps at most `capacity` of them open, closes
the least recently used idle one when it needs a slot, and reopens a log in append mode
on its next append. Reopening costs an open and a close per group commit, so such a process
first fits the pool to every log it will write (`fit_shared_pool`) when the open-file limit
allows, and the pool only evicts when it does not. Durability is untouched: a writer only
gives its descriptor back after its write and fsync have returned, and a descriptor is only
ever closed while nobody uses it, so nothing unsynced is ever left behind in a closed
descriptor.

Thread-safe: appends run in worker threads. A writer holds at most one descriptor at a
time and releases it before asking for another, so waiting for a free slot (every slot in
use at once, more concurrent appends than `capacity`) cannot deadlock.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_CAPACITY = 64
CAPACITY_ENV = "NETDP_OPEN_LOGS"  # overrides DEFAULT_CAPACITY for the process-wide pool (and its fitting)
SPARE_DESCRIPTORS = 256  # left to everything else a process opens (data files, sockets, the event loop)


class LogHandlePool:
    """At most `capacity` descriptors open at once, shared by every log writer that uses the pool."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"a log handle pool needs room for at least one descriptor, got {capacity}")
        self.capacity = capacity
        self._idle: OrderedDict[object, int] = OrderedDict()  # owner -> open fd nobody is using, LRU first
        self._busy: dict[object, int] = {}  # owner -> fd in use (or a reserved slot: -1)
        self._changed = threading.Condition(threading.Lock())
        self.opened = 0  # descriptors opened so far (reopens included), for tests and benchmarks

    @property
    def open_count(self) -> int:
        with self._changed:
            return self._open_locked()

    def grow(self, capacity: int) -> None:
        """Room for at least `capacity` descriptors from now on (writers waiting for a slot may go on)."""
        with self._changed:
            if capacity > self.capacity:
                self.capacity = capacity
                self._changed.notify_all()

    def _open_locked(self) -> int:
        return len(self._idle) + len(self._busy)

    @contextmanager
    def descriptor(self, owner: object, opener: Callable[[], int]) -> Iterator[int]:
        """The owner's open descriptor (opened with `opener` if the pool had closed it), held for the block."""
        fd = self._checkout(owner, opener)
        try:
            yield fd
        finally:
            with self._changed:
                del self._busy[owner]
                self._idle[owner] = fd
                self._changed.notify_all()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Room for one short-lived descriptor outside the pool (the caller opens and closes it itself)."""
        token = object()
        with self._changed:
            self._make_room_locked()
            self._busy[token] = -1
        try:
            yield
        finally:
            with self._changed:
                del self._busy[token]
                self._changed.notify_all()

    def discard(self, owner: object) -> None:
        """Close the owner's descriptor if the pool holds it open (the writer is closing)."""
        with self._changed:
            while owner in self._busy:  # another thread is mid-append on it: let it finish
                self._changed.wait()
            fd = self._idle.pop(owner, None)
            if fd is not None:
                os.close(fd)
                self._changed.notify_all()

    def _checkout(self, owner: object, opener: Callable[[], int]) -> int:
        with self._changed:
            while owner in self._busy:  # one user per descriptor at a time
                self._changed.wait()
            fd = self._idle.pop(owner, None)
            if fd is not None:
                self._busy[owner] = fd
                return fd
            self._make_room_locked()
            self._busy[owner] = -1  # the slot is ours while we open
        try:
            fd = opener()
        except BaseException:
            with self._changed:
                del self._busy[owner]
                self._changed.notify_all()
            raise
        with self._changed:
            self._busy[owner] = fd
            self.opened += 1
        return fd

    def _make_room_locked(self) -> None:
        """Wait until a new descriptor fits, closing the least recently used idle one if that is what it takes."""
        while self._open_locked() >= self.capacity:
            if self._idle:
                _, fd = self._idle.popitem(last=False)
                os.close(fd)  # everything written through it was fsync'd before it went idle
            else:
                self._changed.wait()


def _default_capacity() -> int:
    value = os.environ.get(CAPACITY_ENV)
    return int(value) if value else DEFAULT_CAPACITY


_shared: LogHandlePool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> LogHandlePool:
    """The process-wide pool every ViewLogWriter uses unless given its own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LogHandlePool(_default_capacity())
        return _shared


def fit_shared_pool(logs: int) -> int:
    """Let the process-wide pool keep `logs` logs open at once, as far as the open-file limit allows.

    The soft limit is raised toward the hard one when that is what it takes; `SPARE_DESCRIPTORS`
    stay free for everything else. A pool the operator sized (`NETDP_OPEN_LOGS`) is left alone,
    and a limit too low for more than the default leaves the default. Returns the capacity.
    """
    pool = shared_pool()
    if os.environ.get(CAPACITY_ENV):
        return pool.capacity
    wanted = logs + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):
                pass  # the limit stays as it was: the pool evicts as before
    room = logs if soft == resource.RLIM_INFINITY else min(logs, soft - SPARE_DESCRIPTORS)
    pool.grow(room)
    return pool.capacity
