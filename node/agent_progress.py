"""What a restarted personalized-CD agent reads back from its own view log to rejoin its run.

Every update it started logged its inputs (and, when private, its spend with them) before
anything of the update left the node; so its log says how many updates it started (one whose
release the crash cut short is used up all the same), the ε of every spend (all of them count),
the last model it broadcast (where it resumes; a broadcast the crash cut short before its `sent`
records is not there, and the agent goes on from the one before), and the newest model of each
neighbour it logged as received (its mailbox as it was).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.mailboxes.latest_value import Latest
from node.viewlog import LogContents


@dataclass(frozen=True)
class AgentProgress:
    """An agent's run so far, as its view log holds it."""

    updates: int  # updates started (by their logged inputs): the next update's index
    spends: tuple[viewlog_pb2.BudgetSpent, ...]  # every logged spend, in log order
    model: np.ndarray | None  # its last logged broadcast; None: it has broadcast nothing yet
    received: tuple[tuple[int, Latest], ...]  # (sender, value) of every broadcast it logged as received


def read_progress(contents: LogContents, kind: str) -> AgentProgress:
    """The agent's progress from its public log; `kind`: the kind of the model broadcasts."""
    sent = [record for record in contents.of_kind("sent") if record.kind == kind]
    last = max(sent, key=lambda record: record.sequence, default=None)
    return AgentProgress(
        updates=1 + max((record.step for record in contents.of_kind("step_inputs")), default=-1),
        spends=tuple(contents.of_kind("budget")),
        model=None if last is None else from_tensor(last.payload),
        received=tuple((record.peer, Latest(record.sequence, from_tensor(record.payload)))
                       for record in contents.of_kind("received") if record.kind == kind),
    )
