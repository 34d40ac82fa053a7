"""What went wrong during a run, from the replayed logs: which nodes stopped early, and the drop-outs logged.

A node that logged no final output stopped before the end (killed, crashed, or stopped by the
launcher): the report says when its log stops (its last record, in seconds from the earliest
node's first record) and how far it got (its protocol's `rounds_completed`, where the protocol has
rounds). A node whose log is missing or unusable stopped at an unknown time. Every `drop_out`
record (a neighbour's value that did not arrive before the round's deadline) is counted per
logging node and neighbour, with its rounds, as `netdp log show` lists them per log.
"""

from __future__ import annotations

from collections import defaultdict

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.logview import number_ranges


def fault_block(replay: Replay) -> dict[str, object] | None:
    """The report's `faults` block, or None when every node finished and no drop-out was logged."""
    logs = replay.logs
    origin = min(log.logged_span[0] for log in logs.values())
    stopped = []
    for node in range(replay.topology.n):
        log = logs.get(node)
        if log is not None and log.final_output is not None:
            continue
        facts = replay.realized.node_summary(node)
        stopped.append({
            "node": node,
            "log": "unusable" if log is None else "intact" if log.intact else "damaged",
            "rounds_completed": facts.get("rounds_completed"),
            "last_record_s": None if log is None else log.logged_span[1] - origin,
        })
    rounds: dict[tuple[int, int], list[int]] = defaultdict(list)
    for node, log in sorted(logs.items()):
        for drop in log.of_kind("drop_out"):
            rounds[(node, drop.peer)].append(int(drop.round))
    drop_outs = [{"node": node, "peer": peer, "count": len(listed), "rounds": number_ranges(listed)}
                 for (node, peer), listed in sorted(rounds.items())]
    if not stopped and not drop_outs:
        return None
    return {"stopped": stopped, "drop_outs": drop_outs}


def stopped_sentence(node: dict[str, object]) -> str:
    """One stopped node in a sentence."""
    if node["log"] == "unusable":
        return f"Node {node['node']} left no usable view log: when it stopped is unknown."
    rounds = "" if node["rounds_completed"] is None else f" after completing {node['rounds_completed']} rounds"
    when = "" if node["last_record_s"] is None else f", its last record {node['last_record_s']:.2f} s into the run"
    torn = "; its log ends damaged (a torn tail is what a killed node leaves)" if node["log"] == "damaged" else ""
    return f"Node {node['node']} stopped{rounds} without a final output (killed or crashed){when}{torn}."
