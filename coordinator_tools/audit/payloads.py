"""Auditing structure-only view logs (`netdp collect --structure-only`): what is computed, what is not, and why.

Collecting every node's view log is a coalition of all nodes: two values one node logged can give
its raw input away. The columns a privacy number rests on (exact, paper, LDP, central) need only
the structure of each view (which message from whom, when, drop-outs, refusals, payload shapes),
so a structure-only copy is audited exactly as the full logs are and gives the same numbers. What
compares or scores payload values cannot run on it, and the report's `payloads` block lists it:
the empirical column (the run's canaries, scored on the logged views), the transcript check
(`--with-private-logs`: recomputed values against logged payloads), the utility (final outputs,
learned models) and a protocol's own payload checks (randomized Muffliato's conservation of sums).
The cross-check between logs still matches every message by MessageId, fate and payload shape,
but no longer compares payload bytes; a finding says so.

A run folder is audited as one kind or the other: a folder mixing structure-only and full view
logs is refused, and a record whose payloads disagree with its log's header is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator_tools.audit.checks import TRAJECTORY_CHECK
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.records import Finding, NodeLog
from node.errors import ConfigError
from node.idset import describe_nodes
from node.viewlog import TENSOR_FIELDS

STRIPPED = "the view logs are structure-only copies (netdp collect --structure-only): they hold no payload"
CROSS_CHECK_NOTE = (f"{STRIPPED}, so messages are matched across logs by MessageId, fate and payload shape; "
                    "payload bytes are not compared")
EMPIRICAL = "empirical"
UTILITY = "utility"


def payloads_stripped(rundir: Path, logs: Mapping[int, NodeLog]) -> bool:
    """Whether the run's usable view logs are structure-only copies; ConfigError when some are and some are not."""
    stripped = sorted(node for node, log in logs.items() if log.header.payloads_stripped)
    if stripped and len(stripped) < len(logs):
        full = sorted(set(logs) - set(stripped))
        raise ConfigError(f"{rundir} mixes structure-only view logs ({describe_nodes(stripped)}) with full ones "
                          f"({describe_nodes(full)}): collect the run again into one folder, one way")
    return bool(stripped)


def refuse_payload_options(*, with_private_logs: bool, data_dir: Path | None) -> None:
    """Refuse the test-mode options that compare payloads, which a structure-only run does not hold."""
    if with_private_logs:
        raise ConfigError(f"--with-private-logs: it checks the logged payloads against the private logs; {STRIPPED}")
    if data_dir is not None:
        raise ConfigError(f"--data: it scores the logged outputs and models; {STRIPPED}")


def stripping_problem(kind: str, entry: Any, stripped: bool) -> str | None:
    """Why a record's payloads do not fit its log's header (bytes in a structure-only log, or none in a full one)."""
    for name in TENSOR_FIELDS[kind]:
        tensor = getattr(entry, name)  # an unset one reads as empty: no data, nothing stripped
        if stripped and tensor.data:
            return "it holds payload bytes, but its log's header says they were stripped"
        if not stripped and tensor.stripped_bytes:
            return "its payload was stripped, but its log's header says it is a full log"
    return None


def cross_check_note() -> Finding:
    """The finding that says what the cross-check of structure-only logs does not compare."""
    return Finding("info", "payloads_not_compared", None, CROSS_CHECK_NOTE)


def payloads_block(replay: Replay) -> dict[str, object]:
    """The report's `payloads` block: whether the logs were stripped, and each part not computed, with why."""
    if not replay.payloads_stripped:
        return {"stripped": False, "reason": None, "not_computed": []}
    parts = [
        ("column", EMPIRICAL, "the run's canaries are scored on each observer's logged view, whose payloads were "
                              "stripped"),
        ("check", TRAJECTORY_CHECK, "it compares values recomputed from the private logs with the logged payloads"),
        *(("check", name, "it compares payloads of the view logs") for name in replay.auditor.payload_checks),
        ("block", UTILITY, "it scores the nodes' logged outputs and models"),
    ]
    return {"stripped": True, "reason": STRIPPED,
            "not_computed": [{"kind": kind, "name": name, "reason": reason} for kind, name, reason in parts]}
