"""Plan a synchronous Muffliato run: its pairwise losses, its stopping time, and the noise it needs.

The plan is the audit of the planned transcript (every node completes every round, nobody
drops). On top: T_stop from Muffliato Thm 2, and calibration of σ on the exact loss at its
conservative upper end.
"""

from __future__ import annotations

from coordinator_tools.audit.conversion import Conversion
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.plan import Plan, Target, baseline_sigmas, calibrate_sigma
from coordinator_tools.audit.protocols.muffliato.accountant import (
    account,
    transcript_geometry,
)
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.theory import muffliato_t_stop, worst_case_spread
from node.topology import Topology


def plan(
    topology: Topology,
    *,
    rounds: int,
    accelerated: bool,
    sigma: float,
    sensitivity: float,
    alpha: float,
    delta: float,
    conversion: Conversion = "tight",
    threat_model: ThreatModel = ThreatModel(),
    target: Target | None = None,
) -> Plan:
    """Account the planned run; with a target, at the smallest σ that meets it instead of `sigma`."""
    transcript = planned_transcript(topology, rounds=rounds, accelerated=accelerated)
    details: dict[str, object] = {"rounds": rounds, "accelerated": accelerated}
    geometry = None
    if target is not None:
        geometry = transcript_geometry(transcript, threat_model)
        sigmas = {"exact": calibrate_sigma(geometry.upper, sensitivity=sensitivity, delta=delta, target=target),
                  **baseline_sigmas(topology.n, sensitivity=sensitivity, delta=delta, target=target)}
        sigma = sigmas["exact"]
        details["calibration"] = {"target_eps": target.epsilon, "rule": target.rule, "sigma": sigmas}
    t_stop = (muffliato_t_stop(topology.n, topology.spectral_gap, sigma, worst_case_spread(sensitivity), accelerated)
              if sigma > 0 else None)
    details["t_stop"] = t_stop
    losses = account(
        transcript, geometry, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta,
        threat_model=threat_model, conversion=conversion,
    )  # fmt: skip
    headline = (f"n = {topology.n}, T = {rounds} ({'accelerated' if accelerated else 'plain'}), "
                f"T_stop = {t_stop}, sigma = {sigma:.6g}")
    return Plan(run=transcript, losses=losses, details=details, headline=headline)
