"""How long each round of a synchronous round protocol took, from the times the nodes logged their records.

A node's round t is done when it writes its last record of that round (its sent value, what it
received or dropped for t); every record carries the time it was written (`logged_unix`). Across
nodes, a round's `first_s`, `median_s` and `last_s` are those completion times in seconds from
the earliest node's start (its log header), and `wall_s` is the time from the last completion of
the round before (the start, for the first) to this round's last one: how long the run spent on it.
Protocols without rounds (exchanges, token walks, agents' updates) log no round records: no timing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from node.viewlog import LogContents

# Records that belong to a synchronous round: a gossip value (no message kind) sent or received, a drop-out.
ROUND_RECORDS = frozenset({"sent", "received", "drop_out"})


def round_completions(contents: LogContents) -> dict[int, float]:
    """Round -> when this node wrote its last record of that round (unix seconds)."""
    done: dict[int, float] = {}
    for record in contents.records:
        kind = record.WhichOneof("kind")
        if kind not in ROUND_RECORDS:
            continue
        entry = getattr(record, kind)
        if kind != "drop_out" and entry.kind:
            continue  # a message of another kind (an exchange, a token): not a round's value
        done[int(entry.round)] = max(done.get(int(entry.round), 0.0), record.logged_unix)
    return done


def round_timing(started: Sequence[float], completions: Sequence[Mapping[int, float]]) -> dict[str, object] | None:
    """run.json's `round_timing`: per round, the nodes that completed it and when (None: no round was logged)."""
    logged = [done for done in completions if done]
    if not logged or not started:
        return None
    origin = min(started)
    rows, previous = [], origin
    for t in sorted(set().union(*logged)):
        times = np.sort([done[t] for done in logged if t in done])
        last = float(times[-1])
        rows.append({"round": t, "nodes": int(times.size), "first_s": float(times[0]) - origin,
                     "median_s": float(np.median(times)) - origin, "last_s": last - origin,
                     "wall_s": last - previous})
        previous = last
    return {"origin": "the earliest node's start (its log header)", "unit": "s", "rounds": rows}
