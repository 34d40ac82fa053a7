"""The replay's health as check lines: each log usable, logs agreeing, every value in a view accounted, every
contribution clipped, then the protocol's own checks (payloads reproduced, ...)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coordinator_tools.audit.checks import ACCOUNTED_CHECK, ATOL, CLIP_CHECK, RTOL, SHOWN_PAIRS, Check
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.records import Finding


def replay_checks(replay: Replay) -> list[Check]:
    """The replay's health (each log usable, logs agreeing, every value in a view accounted), then the protocol's
    own checks."""
    return [
        _findings_check("view logs readable and bound to this run", replay.node_problems),
        _findings_check("sent and received records agree across nodes", replay.consistency),
        accounted_values_check(replay),
        *([] if replay.private is None or replay.auditor.input_bound(replay.topology) is None
          else [clip_check(replay)]),
        *replay.auditor.checks(replay),
    ]


def clip_check(replay: Replay) -> Check:
    """Every node clipped what it contributed: the data coordinates of each private input it logged stay within
    the protocol's bound (the canary coordinates after them are the audit's own)."""
    bound = replay.auditor.input_bound(replay.topology)
    dimension = replay.topology.protocol.dimension
    norms = {node: float(np.max(np.linalg.norm(np.atleast_2d(inputs)[:, :dimension], axis=1), initial=0.0))
             for node, inputs in replay.private.inputs.items()}
    over = {node: norm for node, norm in norms.items() if norm > bound * (1.0 + RTOL) + ATOL}
    if not over:
        return Check(CLIP_CHECK, True, f"the inputs of {len(norms)} nodes stay within norm {bound:g}")
    shown = ", ".join(f"node {node} ({norm:.4g})" for node, norm in sorted(over.items())[:SHOWN_PAIRS])
    return Check(CLIP_CHECK, False, f"{len(over)} nodes contributed inputs beyond the clipping bound {bound:g} that "
                 f"the sensitivity assumes: {shown}")


def accounted_values_check(replay: Replay) -> Check:
    """Every value that reached a node is one the protocol's model holds: a value in a message of another kind,
    or from a node that is not a neighbour, reached its receiver all the same, and no column of the audit
    counts it, so the claim for that pair does not cover the run."""
    flows = sorted({(int(entry.claimed_sender), log.node, entry.kind) for log in replay.logs.values()
                    for entry in log.unaccounted})
    if not flows:
        return Check(ACCOUNTED_CHECK, True, "every value in a view is a message of the protocol")
    shown = "; ".join(f"node {'?' if sender < 0 else sender} -> node {receiver} ({kind or 'gossip'!r})"
                      for sender, receiver, kind in flows[:SHOWN_PAIRS])
    senders = sorted({sender for sender, _, _ in flows if sender >= 0})
    named = ", ".join(f"node {s}" for s in senders) or "unnamed senders"
    return Check(ACCOUNTED_CHECK, False, f"{len(flows)} values reached nodes in messages the protocol does not send, "
                 f"so no column accounts for them (from {named}): "
                 f"{shown}")


def _findings_check(name: str, findings: Sequence[Finding]) -> Check:
    errors = [finding for finding in findings if finding.severity == "error"]
    warnings = sum(finding.severity == "warning" for finding in findings)
    if not errors:
        return Check(name, True, f"no errors (warnings: {warnings}, other notes: {len(findings) - warnings})")
    kinds = sorted({finding.kind for finding in errors})
    return Check(name, False, f"{len(errors)} errors ({', '.join(kinds)}); first: {errors[0].detail}")
