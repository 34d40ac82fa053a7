"""Recompute the token's value at every hop from the private logs and compare with every logged payload.

Along the rebuilt history, hop j's holder adds its input of that visit (none on a noise-only
visit past a contribution cap) and, where the public rule puts noise, its draw for that visit
(the draw's step is the holder's visit index): the value at prefix h is the sum of the first h
contributions, times −γ for random-walk DP-SGD, whose inputs are gradient steps. Agreement with every token value
sent, received or refused, every result and every output shows the path and the noise rule
the accountant assumes are what ran.

A holder that died during its visit (it took the token, perhaps logged its input, and never drew
or handed the token on) leaves the history's last hop without its draw: the token is lost there
(`token_lost`) and nothing it would have computed left the node, so the values stop before that
contribution without a mismatch. Only there: a contribution missing its input or draw anywhere
else, or a logged value past the last one computed, fails the check.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.token_sum.rebuild import value_prefix
from coordinator_tools.audit.protocols.token_sum.records import rules_for
from coordinator_tools.audit.protocols.token_sum.run import TokenRun, planned_contributions
from coordinator_tools.audit.records import PrivateSection, carries_value
from coordinator_tools.audit.trajectories import TRAJECTORY_RTOL, PayloadComparison, TrajectoryCheck, missing_inputs
from node.codec import from_tensor
from node.protocols.ring_histogram import INIT_PURPOSE
from node.protocols.token_sum import NOISE_PURPOSE


def prefix_values(run: TokenRun, private: PrivateSection, comparison: PayloadComparison,
                  purpose: str = NOISE_PURPOSE) -> list[np.ndarray]:
    """The token's value at every prefix 0..total; a contribution the private logs cannot explain is a mismatch.

    The token starts at zero plus its originator's `init` draws (a ring histogram's random elements);
    each visit's draw is the one of the protocol's `purpose`.
    """
    origin = run.contributions[0].holder if run.contributions else None
    start = [from_tensor(draw.value) for draw in private.draws.get(origin, ()) if draw.purpose == INIT_PURPOSE]
    values = [np.zeros(run.topology.protocol.vector_length) + sum(start, 0.0)]
    scale = run.value_scale()
    visits: Counter[int] = Counter()
    for hop, contribution in enumerate(run.contributions):
        holder = contribution.holder
        if holder is None:
            comparison.unexplained(-1, f"hop {hop} has no known holder: the values from there on are not recomputed")
            return values
        visit = visits[holder]
        visits[holder] += 1
        inputs = private.inputs[holder]
        draws = [draw for draw in private.draws[holder] if draw.step == visit and draw.purpose == purpose]
        bears = contribution.bears_input
        if (bears and visit >= len(inputs)) or bool(draws) != (contribution.scale is not None):
            if not draws and _lost_during(run, hop):
                return values
            comparison.unexplained(holder, f"hop {hop} (visit {visit} of node {holder}): its private log holds "
                                           f"{max(0, min(1, len(inputs) - visit))} inputs and {len(draws)} draws for "
                                           f"it, the rule puts {'no' if contribution.scale is None else 'one'} draw "
                                           f"and {'one' if bears else 'no'} input there")
            return values
        added = (inputs[visit] if bears else 0.0) + (from_tensor(draws[0].value) if draws else 0.0)
        values.append(values[-1] + scale * added)
    return values


def _lost_during(run: TokenRun, hop: int) -> bool:
    """Whether the token was lost at `hop`, its history's last before the planned end: its holder may have died
    before its draw, with nothing of the visit released."""
    return hop == run.total - 1 and run.total < planned_contributions(run.topology)


def check_trajectories(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every prefix from the private logs and compare it with every logged token value."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    run, private = replay.realized, replay.private
    failed = missing_inputs({c.holder for c in run.contributions if c.holder is not None}, set(private.inputs))
    if failed is not None:
        return failed
    scale = max((float(np.max(np.abs(x), initial=0.0)) for x in private.inputs.values()), default=1.0)
    comparison = PayloadComparison(scale, rtol)
    rules = rules_for(replay.topology)
    values = prefix_values(run, private, comparison, rules.noise_purpose)
    for node, log in replay.logs.items():
        logged = [(key, sent.payload, "sent") for key, sent in log.sent.items() if carries_value(sent.payload)]
        logged += [(key, payload, "received") for key, payload in log.values_in_view().items()]
        for key, payload, where in logged:
            prefix = value_prefix(key, rules, run.total)
            if prefix >= len(values):
                comparison.unexplained(node, f"{where} record of the value at prefix {prefix}, which the history "
                                             "never computes")
            else:
                comparison.compare(node, payload, values[prefix], f"{where} {key.kind} at prefix {prefix}")
        output = run.output_prefix(node)
        if log.final_output is not None and output >= len(values):
            comparison.unexplained(node, f"final output of the value at prefix {output}, which the history never "
                                         "computes")
        elif log.final_output is not None:
            comparison.compare(node, log.final_output.value, run.output_of(values[output]), "final output")
    return comparison.result()
