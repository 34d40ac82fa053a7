"""The audit of a finished run as a function: replay the logs, account every pair, check, report, draw.

`audit_run` is the whole pipeline, for every protocol (`netdp audit`, `netdp demo`, the Python
API and the tests call it): the replay picks the protocol's auditor from the logs' headers, and
the auditor rebuilds, accounts and checks the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from coordinator_tools.audit.averaging_utility import averaging_utility
from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.collusion import (
    NO_ATTACK_NOTE,
    Collusion,
    coalition_attack_pairs,
    coalition_members,
    coalition_threat_model,
    require_eavesdropper_views,
    require_joint_views,
)
from coordinator_tools.audit.combinations import combinations_block
from coordinator_tools.audit.conversion import Conversion
from coordinator_tools.audit.empirical import CanaryAudit, canary_audit, planted_canaries
from coordinator_tools.audit.faults import fault_block
from coordinator_tools.audit.figures import write_figures
from coordinator_tools.audit.html import write_html
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.payloads import STRIPPED, payloads_block
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.replay import read_canary_signs, replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.audit.report import Report, build_report, hop_distances, write_report
from node.codec import from_tensor
from node.errors import ConfigError

DEFAULT_DELTA = 1e-5
# "auto" attacks every pair up to this many nodes: the attack costs about n^2 * runs * view size.
AUTO_ATTACK_MAX_N = 32
AttackPairs = Literal["auto", "all", "none"] | tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class AuditOptions:
    """How to account a run; None means the topology's published value."""

    alpha: float | None = None
    delta: float = DEFAULT_DELTA
    observer_knows_own_noise: bool = True
    conversion: Conversion = "tight"
    attack_pairs: AttackPairs = "auto"
    attack_runs: int | None = None  # None: the protocol's attack's default
    attack_seed: int | None = None
    with_private_logs: bool = False
    data: Path | None = None  # learning runs: the data folder, for the utility block and replay checks (test mode)
    colluders: tuple[int, ...] = ()  # a coalition accounted as one observer (the report's `collusion` block)
    eavesdropper: bool = False  # account an outsider who sees every message and knows no draw, not each node


def audit_run(rundir: Path, out_dir: Path, options: AuditOptions = AuditOptions(), *,
              csv: bool = False) -> dict[str, object]:
    """Audit RUNDIR into out_dir (report.json, pairs.parquet, figures, index.html); return the report document.

    `audit_report` is the same, returning the report's model beside its document.
    """
    return audit_report(rundir, out_dir, options, csv=csv).document


def audit_report(rundir: Path, out_dir: Path, options: AuditOptions = AuditOptions(), *, csv: bool = False) -> Report:
    """Audit RUNDIR into out_dir (report.json, pairs.parquet, figures, index.html); return the report written.

    `csv` asks for the pairs' CSV export too (written anyway for small runs, see `wants_csv`).

    Raises ConfigError when RUNDIR has no topology or names a protocol nobody audits, and
    LogFormatError when it has no usable log.
    """
    replay = replay_run(rundir, with_private_logs=options.with_private_logs, data_dir=options.data)
    auditor, run = replay.auditor, replay.realized
    members = ()
    if options.colluders:
        require_joint_views(auditor)
        members = coalition_members(options.colluders, run.n)
    if options.eavesdropper:
        require_eavesdropper_views(auditor, options.colluders)
    accounting = _accounting(replay, options)
    runs = {} if options.attack_runs is None else {"attack_runs": options.attack_runs}
    attack_pairs = _resolve_attack_pairs(options.attack_pairs, run.n)
    losses = auditor.account(run, **accounting, attack_pairs=attack_pairs, rng_seed=options.attack_seed, **runs)
    canaries = _canary_block(replay, accounting, options.attack_seed)
    if isinstance(canaries, CanaryAudit):
        losses.empirical_eps_lower = canaries.eps_lower
        losses.notes.extend(canaries.notes)
    # More noise never leaks more: checked at 2σ where σ is a published parameter (not personalized CD's budgets)
    has_sigma = "sigma" in type(replay.topology.protocol).model_fields
    checks = loss_checks(losses, recompute=(lambda sigma: auditor.account(run, **{**accounting, "sigma": sigma}))
                         if has_sigma else None)
    checks += replay_checks(replay)
    if isinstance(canaries, CanaryAudit):
        checks += canaries.checks
    collusion = None
    if members:
        joint = auditor.account(
            run, **{**accounting, "threat_model": coalition_threat_model(accounting["threat_model"], members)},
            attack_pairs=None if attack_pairs is None else coalition_attack_pairs(members, run.n),
            rng_seed=options.attack_seed, **runs,
        )  # fmt: skip
        collusion = Collusion(members, joint, losses, hop_distances(run.topology),
                              notes=(NO_ATTACK_NOTE,) if attack_pairs is None else ())
        checks += collusion.checks()
    extra = {
        "canaries": canaries.to_json() if isinstance(canaries, CanaryAudit) else canaries,
        "options": {**asdict(options), "data": None if options.data is None else str(options.data),
                    "sensitivity_published": replay.topology.protocol.sensitivity},
        "replay": replay.to_json(),
        "faults": fault_block(replay),
        "payloads": payloads_block(replay),
        **auditor.report_extras(replay, losses, accounting),
    }
    if collusion is not None:
        extra["collusion"] = collusion.to_json()
    if auditor.averaging:
        extra["combinations"] = combinations_block(replay, int(losses.reconstructable.sum()))
        extra["utility"] = averaging_utility(replay, options.data)
    elif options.data is not None:
        extra["utility"] = auditor.utility(replay, options.data)
    report = build_report(losses, run, checks=checks, sampler_kinds=replay.sampler_kinds, extra=extra, csv=csv)
    write_report(report, out_dir)
    write_html(report.document, out_dir, write_figures(report.document, out_dir, out_dir))
    return report


def _canary_block(replay: Replay, accounting: Mapping[str, object], seed: int | None
                  ) -> CanaryAudit | dict[str, object] | None:
    """The one-run canary audit of a run that planted canaries; the reason it was not computed; None: no canaries."""
    count = replay.topology.protocol.canaries
    if not count:
        return None
    if replay.payloads_stripped:
        return {"canaries": count, "pairs": 0, "reason": STRIPPED}
    coins, problems = read_canary_signs(replay.rundir, replay.topology)
    planted = planted_canaries({node: from_tensor(record.signs) for node, record in coins.items()},
                               {node: record.magnitude for node, record in coins.items()}, count)
    canary_model = replay.auditor.canary_model(replay.realized, planted)
    if canary_model is None:
        return {"canaries": count, "pairs": 0, "reason": f"the canaries of {replay.auditor.name} are not audited"}
    audit = canary_audit(canary_model, replay.logs, planted, dimension=replay.topology.protocol.dimension,
                         sigma=accounting["sigma"], sensitivity=accounting["sensitivity"], delta=accounting["delta"],
                         threat_model=accounting["threat_model"], seed=seed)
    audit.notes.extend(f"empirical: node {problem.node}'s canaries are not audited ({problem.detail})"
                       for problem in problems)
    return audit


def _accounting(replay: Replay, options: AuditOptions) -> dict[str, object]:
    """The arguments every account() call of this audit shares (the attack's are added once)."""
    params = replay.topology.protocol
    return {
        "sigma": params.sigma,
        "sensitivity": replay.effective_sensitivity,
        "alpha": params.alpha if options.alpha is None else options.alpha,
        "delta": options.delta,
        "threat_model": ThreatModel(observer_knows_own_noise=options.observer_knows_own_noise,
                                    eavesdropper=options.eavesdropper),
        "conversion": options.conversion,
    }


def _resolve_attack_pairs(choice: AttackPairs, n: int) -> Literal["all"] | list[tuple[int, int]] | None:
    """account()'s attack_pairs for a user's choice; named pairs must be distinct nodes of the run."""
    if choice == "auto":
        choice = "all" if n <= AUTO_ATTACK_MAX_N else "none"
    if choice == "none":
        return None
    if choice == "all":
        return "all"
    bad = [(u, v) for u, v in choice if u == v or not (0 <= u < n and 0 <= v < n)]
    if bad:
        raise ConfigError(f"--attack-pairs: {bad[0][0]}:{bad[0][1]} is not a pair of distinct nodes in 0..{n - 1}")
    return list(choice)
