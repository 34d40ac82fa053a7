"""How many linear combinations of the others' noisy inputs each observer of an averaging run received.

An averaging run's view is linear in the noisy inputs z = x + η (Muffliato): an observer that
receives n − 1 or more independent combinations can solve for every other node's noisy input,
which is typical once T·deg ≥ n − 1; amplification by gossip lives where T·deg is well below n.
The report's `combinations` block states this for the run that happened: the values that reached
each observer (received, or refused with their payload: every value in its view), against the
n − 1 unknown inputs, the synchronous protocol's planned T·deg beside them, and the pairs the
accountant found reconstructed.
"""

from __future__ import annotations

from coordinator_tools.audit.protocols.base import Replay
from node.protocols.muffliato import PROTOCOL_NAME as SYNCHRONOUS

AMPLIFICATION = ("An observer with n − 1 or more independent combinations can learn everyone's noisy input, "
                 "which is typical once T·deg ≥ n − 1: amplification lives where T·deg is well below n.")


def combinations_block(replay: Replay, reconstructed_pairs: int) -> dict[str, object]:
    """The report's `combinations` block: counts per observer (None: no usable log) and the sentence that reads them."""
    topology = replay.topology
    n = topology.n
    received = [len(replay.logs[v].values_in_view()) if v in replay.logs else None for v in range(n)]
    planned = None
    if replay.auditor.name == SYNCHRONOUS:
        planned = [topology.protocol.rounds * len(topology.neighbours[v]) for v in range(n)]
    block: dict[str, object] = {
        "received_per_observer": received,
        "planned_per_observer": planned,
        "unknown_inputs": n - 1,
        "reconstructed_pairs": reconstructed_pairs,
        "pairs": n * (n - 1),
    }
    block["sentence"] = combinations_sentence(block, rounds=getattr(topology.protocol, "rounds", None),
                                              degrees=[len(topology.neighbours[v]) for v in range(n)])
    return block


def combinations_sentence(block: dict[str, object], *, rounds: int | None, degrees: list[int]) -> str:
    """The block in words: what each observer received, against n − 1 unknowns, and what was reconstructed."""
    counts = [count for count in block["received_per_observer"] if count is not None]
    received = _span(counts) if counts else "an unknown number of"
    planned = ""
    if block["planned_per_observer"] is not None:
        planned = f" (T·deg = {rounds}·{_span(degrees)} = {_span(block['planned_per_observer'])} planned)"
    return (f"Each observer received {received} combinations of the others' noisy inputs{planned} against "
            f"n − 1 = {block['unknown_inputs']} unknown inputs; {block['reconstructed_pairs']} of {block['pairs']} "
            f"pairs were reconstructed. {AMPLIFICATION}")


def _span(values: list[int]) -> str:
    """'7' or '5–9': the range of a few counts."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}–{high}"
