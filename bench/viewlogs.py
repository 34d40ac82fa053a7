"""What the benchmarks read from a finished run's view logs: when rounds, exchanges and hops happened.

Every figure of a run is timed from the logs' timestamps (`logged_unix`, written once the
record is durable), so start-up and shutdown stay out of it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from coordinator_tools.cluster.launch import node_log_dir
from node.mailboxes.token_slot import RECEIVED
from node.protocols.token_sum import SUM_TOKEN_ID
from node.viewlog import VIEW_LOG_NAME, LogContents, read_log


def view_log(rundir: Path, node_id: int) -> LogContents:
    return read_log(node_log_dir(rundir, node_id) / VIEW_LOG_NAME)


def round_latencies_ms(rundir: Path, n: int) -> list[float]:
    """Per node, ms between completing consecutive rounds (its last `sent` record of each), from round 1 on."""
    latencies: list[float] = []
    for v in range(n):
        done: dict[int, float] = {}
        for record in view_log(rundir, v).records:
            if record.WhichOneof("kind") == "sent":
                done[record.sent.round] = max(done.get(record.sent.round, 0.0), record.logged_unix)
        rounds = sorted(done)
        latencies += [(done[b] - done[a]) * 1000 for a, b in itertools.pairwise(rounds[1:])]
    return latencies


def round_seconds(rundir: Path, n: int, rounds: int) -> tuple[list[float], int]:
    """Seconds between the moments the last node logged its values of consecutive rounds; and the drop-outs."""
    last = [0.0] * rounds
    drop_outs = 0
    for v in range(n):
        log = view_log(rundir, v)
        for record in log.records:
            if record.WhichOneof("kind") == "sent" and not record.sent.kind:
                last[record.sent.round] = max(last[record.sent.round], record.logged_unix)
        drop_outs += len(log.of_kind("drop_out"))
    return [b - a for a, b in itertools.pairwise(last)], drop_outs


def initiated_exchanges(rundir: Path, n: int) -> tuple[Counter[str], float]:
    """Initiators' exchange outcomes (proposed, committed, declined, aborted), and seconds from first proposal
    to last commit."""
    outcomes: Counter[str] = Counter()
    first_proposal, last_commit = float("inf"), 0.0
    for v in range(n):
        for record in view_log(rundir, v).records:
            if record.WhichOneof("kind") != "exchange" or record.exchange.role != "initiator":
                continue
            outcomes[record.exchange.phase] += 1
            if record.exchange.phase == "proposed":
                first_proposal = min(first_proposal, record.logged_unix)
            elif record.exchange.phase == "committed":
                last_commit = max(last_commit, record.logged_unix)
    return outcomes, last_commit - first_proposal


def token_hop_ms(rundir: Path, n: int) -> list[float]:
    """Gaps between consecutive hops of the sum token, from the next holders' `received` custody records."""
    taken: dict[int, float] = {}
    for v in range(n):
        for record in view_log(rundir, v).records:
            if record.WhichOneof("kind") == "token" and record.token.token_id == SUM_TOKEN_ID \
                    and record.token.phase == RECEIVED:
                taken[record.token.hop] = record.logged_unix
    hops = sorted(taken)
    if hops != list(range(1, len(hops) + 1)):
        raise RuntimeError(f"the sum token's hops are not one chain from 1: {hops[:10]}...")
    return [(taken[b] - taken[a]) * 1000 for a, b in itertools.pairwise(hops)]
