"""The garbage collector's pace while one event loop carries the node ids of a run.

A round keeps every message of it in flight for as long as the round lasts: its envelope,
the future its sender awaits, the coroutines and callbacks around it. With many ids on one
loop (a virtual run, a process hosting many ids) that is hundreds of thousands of objects
for seconds. At CPython's default pace (a young collection every 700 new objects, an older one
every 10 of those) they outlive the young collections, reach the oldest generation, and each
full collection walks all of them again: at n = 2048 ids in one process that was about a
third of a round's time. For the run, `run_pace` freezes what set the run up (it lives as
long as the run: no collection needs to walk it) and lets the young generation grow to
RUN_THRESHOLDS[0] objects, so that most of a round's objects are freed by reference counting
before any collection sees them. Cyclic garbage is still collected, in fewer, larger passes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# (young objects before a young collection, young collections per middle one, middle per full one)
RUN_THRESHOLDS = (50_000, 20, 10)


@contextmanager
def run_pace() -> Iterator[None]:
    """Within: the heap built so far frozen and the collector at RUN_THRESHOLDS; after: both as they were."""
    thresholds = gc.get_threshold()
    frozen_already = gc.get_freeze_count() > 0
    gc.freeze()
    gc.set_threshold(*RUN_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen_already:  # an outer run_pace still holds its own frozen heap
            gc.unfreeze()
