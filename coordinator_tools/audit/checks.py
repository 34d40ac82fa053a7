"""The invariants an audit checks on every run, as pass, fail or warning lines for the report.

Between the three loss columns (20-accounting.md): empirical_lower <= exact <= LDP, exact
equals LDP where v can reconstruct u's noisy input, and no loss grows when sigma grows.
A pair whose paper bound is below the exact loss is a *warning* ("paper bound
undercounts"): the published bound is then no upper bound there, but that is the closed
form's limit, not an auditor bug, so the line keeps ok=True (the run is healthy) with level
"warning". The replay's own health (logs intact, views agreeing) is checked here too, with
each protocol's own checks (payloads reproduced, ...), so the report has one list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.records import Finding
from coordinator_tools.audit.trajectories import TrajectoryCheck

if TYPE_CHECKING:
    from coordinator_tools.audit.replay import Replay

# Two losses computed along different routes count as equal within this much.
RTOL = 1e-9
ATOL = 1e-12
# Reconstructable pairs reach LDP up to the exact method's own rounding.
RECONSTRUCTION_RTOL = 1e-6
SHOWN_PAIRS = 5
SHOWN_MISMATCHES = 3
UNDERCOUNT_CHECK = "paper bound is an upper bound"
Level = Literal["pass", "fail", "warning"]


@dataclass(frozen=True)
class Check:
    """One line of the report's checks: what was checked, whether it held, and where not.

    A warning holds (ok) but tells the reader something is not what it seems.
    """

    name: str
    ok: bool
    detail: str
    warning: bool = False

    @property
    def level(self) -> Level:
        return "fail" if not self.ok else "warning" if self.warning else "pass"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "level": self.level, "detail": self.detail}


def paper_undercounts(losses: PairwiseLosses) -> np.ndarray:
    """Where [u, v] the paper bound is below the exact loss (standard-tolerance end), as a bool mask.

    Compared in RDP; a closed form stated in (ε, δ) only (no RDP) is compared in ε.
    """
    eps_only = np.isnan(losses.paper_rdp)
    paper = np.where(eps_only, losses.paper_eps, losses.paper_rdp)
    exact = np.where(eps_only, losses.exact_eps, losses.exact_rdp)
    return np.asarray(paper < exact * (1.0 - RTOL) - ATOL)


def undercount_ratio(losses: PairwiseLosses) -> np.ndarray:
    """exact / paper per pair, in RDP (in ε where the closed form states no RDP): how far the bound is below."""
    eps_only = np.isnan(losses.paper_rdp)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(eps_only, losses.exact_eps / losses.paper_eps, losses.exact_rdp / losses.paper_rdp)


def loss_checks(losses: PairwiseLosses, *, recompute: Callable[[float], PairwiseLosses] | None = None) -> list[Check]:
    """Every loss invariant that applies; `recompute(sigma)` re-accounts the same run at another sigma."""
    checks = [exact_below_ldp(losses), reconstructable_is_ldp(losses), undercount_finding(losses)]
    if losses.empirical_eps_lower is not None:
        checks.insert(0, empirical_below_exact(losses))
    if recompute is not None:
        checks.append(monotone_in_sigma(losses, recompute(2.0 * losses.sigma)))
    return checks


def empirical_below_exact(losses: PairwiseLosses) -> Check:
    """The attack's lower bounds (all holding together at 95% confidence) must not exceed the exact loss's upper end."""
    empirical = losses.empirical_eps_lower
    if empirical is None:
        raise ValueError("the attack did not run: there is no empirical column to check")
    attacked = int(np.count_nonzero(~np.isnan(empirical)))
    return _pairwise_check(
        "empirical lower bound <= exact (eps)", _exceeds(empirical, losses.exact_eps_upper), empirical,
        losses.exact_eps_upper, passed=f"all {attacked} attacked pairs (their lower bounds hold together at 95% confidence)",
    )


def exact_below_ldp(losses: PairwiseLosses) -> Check:
    """No view can reveal more than u's own noisy value does (the local-DP loss)."""
    ldp = losses.ldp_pairs("rdp")
    above = _exceeds(losses.exact_rdp, ldp) | _exceeds(losses.exact_eps, losses.ldp_pairs("eps"))
    return _pairwise_check("exact <= LDP", above, losses.exact_rdp, ldp, passed=f"all {_count(losses)} pairs")


def reconstructable_is_ldp(losses: PairwiseLosses) -> Check:
    """Where v can solve for u's noisy input, its loss is exactly the local-DP loss."""
    ldp = losses.ldp_pairs("rdp")
    off = losses.reconstructable & ~np.isclose(losses.exact_rdp_upper, ldp, rtol=RECONSTRUCTION_RTOL, atol=ATOL)
    count = int(np.count_nonzero(losses.reconstructable))
    return _pairwise_check("exact = LDP where v reconstructs u", off, losses.exact_rdp_upper, ldp,
                           passed=f"all {count} reconstructable pairs")


def monotone_in_sigma(losses: PairwiseLosses, doubled: PairwiseLosses) -> Check:
    """More noise never leaks more, in any column of any pair."""
    columns = ("paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper")
    grew = {name: _exceeds(getattr(doubled, name), getattr(losses, name)) for name in columns}
    worst = max(columns, key=lambda name: int(np.count_nonzero(grew[name])))
    return _pairwise_check(
        "losses do not grow with sigma", grew[worst], getattr(doubled, worst), getattr(losses, worst),
        passed=f"sigma {losses.sigma:g} -> {doubled.sigma:g}: all {_count(losses)} pairs, every column",
        column=f"{worst} (sigma {losses.sigma:g} -> {doubled.sigma:g})",
    )


def undercount_finding(losses: PairwiseLosses) -> Check:
    """Whether the paper's closed form bounds every pair: a warning (still ok) where it undercounts some."""
    below = paper_undercounts(losses)
    count = int(np.count_nonzero(below))
    if count == 0:
        return Check(UNDERCOUNT_CHECK, True, f"the paper's bound is at least the exact loss on all {_count(losses)} "
                     "pairs")
    worst = float(np.max(undercount_ratio(losses)[below]))
    shown = ", ".join(f"{u}->{v}" for u, v in np.argwhere(below)[:SHOWN_PAIRS])
    return Check(UNDERCOUNT_CHECK, True, f"the paper's bound undercounts {count} of {_count(losses)} pairs (by up to "
                 f"{worst:.3g}x): it is not an upper bound here; e.g. {shown}", warning=True)


def replay_checks(replay: Replay) -> list[Check]:
    """The replay's health (each log usable, logs agreeing), then the protocol's own checks."""
    return [
        _findings_check("view logs readable and bound to this run", replay.node_problems),
        _findings_check("sent and received records agree across nodes", replay.consistency),
        *replay.auditor.checks(replay),
    ]


def trajectory_check(trajectories: TrajectoryCheck) -> Check:
    """Recomputing every node's values from its private input and noise reproduces its logs."""
    deviation = trajectories.max_relative_deviation
    detail = f"{trajectories.compared} logged payloads, max relative deviation {deviation:.2g}"
    if trajectories.mismatches:
        shown = "; ".join(mismatch.detail for mismatch in trajectories.mismatches[:SHOWN_MISMATCHES])
        detail += f"; {len(trajectories.mismatches)} not reproduced, first: {shown}"
    return Check("transcript reproduces the logged payloads", trajectories.ok, detail)


def _findings_check(name: str, findings: Sequence[Finding]) -> Check:
    errors = [finding for finding in findings if finding.severity == "error"]
    warnings = sum(finding.severity == "warning" for finding in findings)
    if not errors:
        return Check(name, True, f"no errors (warnings: {warnings}, other notes: {len(findings) - warnings})")
    kinds = sorted({finding.kind for finding in errors})
    return Check(name, False, f"{len(errors)} errors ({', '.join(kinds)}); first: {errors[0].detail}")


def _exceeds(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """value > bound beyond rounding (NaN, i.e. no value, never exceeds)."""
    return np.asarray(value > bound * (1.0 + RTOL) + ATOL)


def _pairwise_check(name: str, failed: np.ndarray, value: np.ndarray, bound: np.ndarray, *, passed: str,
                    column: str | None = None) -> Check:
    """A check over pairs: ok when no pair failed, else the count and the worst pair."""
    count = int(np.count_nonzero(failed))
    if count == 0:
        return Check(name, True, passed)
    gap = np.where(failed, value - bound, -np.inf)
    u, v = np.unravel_index(int(np.argmax(gap)), gap.shape)
    where = f" in {column}" if column else ""
    return Check(name, False, f"{count} pairs fail{where}; worst {u}->{v}: {value[u, v]:.6g} vs {bound[u, v]:.6g}")


def _count(losses: PairwiseLosses) -> int:
    return losses.n * (losses.n - 1)

