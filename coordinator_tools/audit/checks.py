"""The invariants an audit checks on every run, as pass, fail or warning lines for the report.

Between the loss columns (20-accounting.md): empirical_lower <= exact <= LDP (and the model
attack's lower bound <= exact, a self-check), exact equals LDP where v can reconstruct u's noisy
input, and no loss grows when sigma grows. Where the exact loss is an interval, every check and
flag reads its upper end (the proven bound).
A pair whose paper bound is below the exact loss is a *warning* ("paper bound
undercounts"): the published bound is then no upper bound there, but that is the closed
form's limit, not an auditor bug, so the line keeps ok=True (the run is healthy) with level
"warning". A protocol with a corrected closed form beside the printed one (`paper_corrected`) gets
the same comparison for it, and the line says which of the two undercounts and on how many pairs.
Where the exact loss is conditioned on a walk's path and the bound is ex ante over it, the
warning is named and worded as that comparison, not as an undercount. Where the exact column is a
proven upper bound and not the loss itself (learning runs, `exact_is_bound`), a closed form below
it is no evidence of an undercount: the line is a plain statement, not a warning. A pair whose exact loss
was not computed (NaN: an enumeration refused up front) is no evidence either way: a check that
held on the other pairs says how many were not computed and is a warning too, never a plain
pass. A check with nothing to check (no reconstructable pair, no pair with a canary bound) says
"not applicable" rather than "all 0 pairs", which would read as evidence. A closed form of 0
below a positive exact loss undercounts by an unbounded factor, and says so in words. The
replay's own health (logs intact, views agreeing) is checked beside these, with each
protocol's own checks (`replay_checks`), so the report has one list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.trajectories import TrajectoryCheck

# Two losses computed along different routes count as equal within this much.
RTOL = 1e-9
ATOL = 1e-12
# Reconstructable pairs reach LDP up to the exact method's own rounding.
RECONSTRUCTION_RTOL = 1e-6
SHOWN_PAIRS = 5
SHOWN_MISMATCHES = 3
UNDERCOUNT_CHECK = "paper bound is an upper bound"
ACCOUNTED_CHECK = "every value that reached a node is in the audited model"
CLIP_CHECK = "every contribution was clipped (private logs)"
TRAJECTORY_CHECK = "transcript reproduces the logged payloads"
# The same comparison against an exact column conditioned on what the observer is not told (followed by what).
CONDITIONED_UNDERCOUNT_CHECK = "paper bound (ex ante) vs exact given"
# The same comparison against an exact column that is a proven upper bound, not the loss (learning runs).
BOUND_COMPARISON_CHECK = "paper bound vs exact (a proven upper bound)"
Level = Literal["pass", "fail", "warning"]
# The closed forms a report compares with the exact loss: the column prefix and how people read it.
PaperVariant = Literal["paper", "paper_corrected"]
PAPER_VARIANTS: dict[PaperVariant, str] = {"paper": "the paper's bound",
                                           "paper_corrected": "the corrected form (paper_corrected)"}


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


def paper_variants(losses: PairwiseLosses) -> list[PaperVariant]:
    """The closed forms this run has: the paper's, and its corrected form where the protocol has one."""
    return [variant for variant in PAPER_VARIANTS if getattr(losses, f"{variant}_rdp") is not None]


def paper_undercounts(losses: PairwiseLosses, variant: PaperVariant = "paper") -> np.ndarray:
    """Where [u, v] the closed form is below the exact loss (standard-tolerance end), as a bool mask.

    Compared in RDP; a closed form stated in (ε, δ) only (no RDP) is compared in ε. With the
    default conversion both ε are on one basis, so the two comparisons agree.
    """
    paper, exact = _compared(losses, variant)
    return np.asarray(paper < exact * (1.0 - RTOL) - ATOL)


def undercount_ratio(losses: PairwiseLosses, variant: PaperVariant = "paper") -> np.ndarray:
    """exact / closed form per pair, in RDP (in ε where it states no RDP): how far the bound is below."""
    paper, exact = _compared(losses, variant)
    with np.errstate(divide="ignore", invalid="ignore"):
        return exact / paper


def _compared(losses: PairwiseLosses, variant: PaperVariant) -> tuple[np.ndarray, np.ndarray]:
    """(closed form, exact) per pair in the unit they are compared in: RDP, or ε where the form states no RDP."""
    rdp, eps = getattr(losses, f"{variant}_rdp"), getattr(losses, f"{variant}_eps")
    eps_only = np.isnan(rdp)
    return np.where(eps_only, eps, rdp), np.where(eps_only, losses.exact_eps, losses.exact_rdp)


def loss_checks(losses: PairwiseLosses, *, recompute: Callable[[float], PairwiseLosses] | None = None) -> list[Check]:
    """Every loss invariant that applies; `recompute(sigma)` re-accounts the same run at another sigma."""
    checks = [exact_below_ldp(losses), reconstructable_is_ldp(losses), undercount_finding(losses)]
    if losses.model_attack_eps_lower is not None:
        checks.insert(0, model_attack_below_exact(losses))
    if losses.empirical_eps_lower is not None:
        checks.insert(0, empirical_below_exact(losses))
    if recompute is not None:
        checks.append(monotone_in_sigma(losses, recompute(2.0 * losses.sigma)))
    return checks


def empirical_below_exact(losses: PairwiseLosses) -> Check:
    """The real run's canary bounds (all holding together at 95% confidence) must not exceed the exact loss's upper
    end: a pair above it leaked more in the run than the audit's model allows."""
    if losses.empirical_eps_lower is None:
        raise ValueError("the run planted no canaries: there is no empirical column to check")
    return _lower_bound_check("empirical lower bound <= exact (eps)", losses.empirical_eps_lower, losses,
                              "pairs audited with the run's canaries")


def model_attack_below_exact(losses: PairwiseLosses) -> Check:
    """The model attack's lower bounds (together at 95%) must not exceed the exact upper end: the arithmetic's
    self-check (the attack replays the audit's own model, so it cannot catch a real run that differs from it)."""
    if losses.model_attack_eps_lower is None:
        raise ValueError("the model attack did not run: there is no model-attack column to check")
    return _lower_bound_check("model attack lower bound <= exact (eps)", losses.model_attack_eps_lower, losses,
                              "attacked pairs (a self-check of the arithmetic: the attack replays the audit's "
                              "own model)")


def _lower_bound_check(name: str, lower: np.ndarray, losses: PairwiseLosses, what: str) -> Check:
    """Every pair's lower bound on ε (NaN: not bounded) at most its exact loss's upper end."""
    count = int(np.count_nonzero(~np.isnan(lower)))
    return _pairwise_check(name, _exceeds(lower, losses.exact_eps_upper), lower, losses.exact_eps_upper,
                           passed=f"all {count} {what}; their lower bounds hold together at 95% confidence" if count
                           else not_applicable(what))


def exact_below_ldp(losses: PairwiseLosses) -> Check:
    """No view can reveal more than u's own noisy value does (the local-DP loss): the exact loss's upper end."""
    ldp = losses.ldp_pairs("rdp")
    above = _exceeds(losses.exact_rdp_upper, ldp) | _exceeds(losses.exact_eps_upper, losses.ldp_pairs("eps"))
    missing = not_computed_pairs(losses)
    return _pairwise_check("exact <= LDP", above, losses.exact_rdp_upper, ldp,
                           passed=_all_pairs(_count(losses), missing), missing=missing)


def reconstructable_is_ldp(losses: PairwiseLosses) -> Check:
    """Where v can solve for u's noisy input, its loss is exactly the local-DP loss."""
    ldp = losses.ldp_pairs("rdp")
    missing = losses.reconstructable & not_computed_pairs(losses)
    off = losses.reconstructable & ~missing & ~np.isclose(losses.exact_rdp_upper, ldp, rtol=RECONSTRUCTION_RTOL,
                                                          atol=ATOL)
    count = int(np.count_nonzero(losses.reconstructable))
    return _pairwise_check("exact = LDP where v reconstructs u", off, losses.exact_rdp_upper, ldp,
                           passed=_all_pairs(count, missing, "reconstructable pairs"), missing=missing)


def monotone_in_sigma(losses: PairwiseLosses, doubled: PairwiseLosses) -> Check:
    """More noise never leaks more, in any column of any pair."""
    columns = ("paper_rdp", "paper_eps", "exact_rdp_lower", "exact_eps_lower", "exact_rdp_upper", "exact_eps_upper")
    grew = {name: _exceeds(getattr(doubled, name), getattr(losses, name)) for name in columns}
    worst = max(columns, key=lambda name: int(np.count_nonzero(grew[name])))
    missing = not_computed_pairs(losses) | not_computed_pairs(doubled)
    return _pairwise_check(
        "losses do not grow with sigma", grew[worst], getattr(doubled, worst), getattr(losses, worst),
        passed=f"sigma {losses.sigma:g} -> {doubled.sigma:g}: {_all_pairs(_count(losses), missing)}, every column",
        column=f"{worst} (sigma {losses.sigma:g} -> {doubled.sigma:g})", missing=missing,
    )


def undercount_finding(losses: PairwiseLosses) -> Check:
    """Whether each closed form bounds every pair: a warning (still ok) naming the ones that undercount some, or
    saying how many pairs had no exact loss to compare with.

    Where the exact column is conditioned on something the observer is not told (a walk's path), the bound, ex
    ante over it, and the exact loss are not the same quantity: the line is named and worded for what it compares.
    Where the exact column is a proven upper bound (`exact_is_bound`), a closed form below it may still bound the
    loss: the line says where it is below, as a plain statement.
    """
    total = _count(losses)
    missing = not_computed_pairs(losses)
    given = losses.exact_given
    if losses.exact_is_bound:
        name = BOUND_COMPARISON_CHECK if given is None else f"{BOUND_COMPARISON_CHECK} given {given}"
        exact = "exact, a proven upper bound" + ("," if given is None else f" given {given},")
    else:
        name = UNDERCOUNT_CHECK if given is None else f"{CONDITIONED_UNDERCOUNT_CHECK} {given}"
        exact = "the exact loss" if given is None else f"the exact loss given {given}"
    parts, below_any = [], False
    for variant in paper_variants(losses):
        if np.isnan(_compared(losses, variant)[0]).all():
            parts.append(f"{PAPER_VARIANTS[variant]}: none, the protocol states no closed form")
            continue
        below = paper_undercounts(losses, variant)
        count = int(np.count_nonzero(below))
        if count == 0:
            parts.append(f"{PAPER_VARIANTS[variant]} is at least {exact} on {_all_pairs(total, missing)}")
            continue
        below_any = True
        by = _by_up_to(float(np.max(undercount_ratio(losses, variant)[below])))
        shown = ", ".join(f"{u}->{v}" for u, v in np.argwhere(below)[:SHOWN_PAIRS])
        if losses.exact_is_bound:
            parts.append(f"{PAPER_VARIANTS[variant]} is below {exact} on {count} of {total} pairs ({by}): no "
                         f"evidence that it undercounts, the loss itself may lie below both; e.g. {shown}")
        elif given is None:
            parts.append(f"{PAPER_VARIANTS[variant]} undercounts {count} of {total} pairs ({by}): "
                         f"it is not an upper bound here; e.g. {shown}")
        else:
            parts.append(f"{PAPER_VARIANTS[variant]} is below {exact} on {count} of {total} pairs ({by}): not the "
                         f"same quantity: the bound is ex ante over {given}, which the observer is not told: an "
                         f"observer told {given} would learn more than the bound there, which does not show the "
                         f"bound below what one who is not told it learns; e.g. {shown}")
    warned = below_any and not losses.exact_is_bound
    return Check(name, True, "; ".join(parts), warning=warned or bool(missing.any()))


def trajectory_check(trajectories: TrajectoryCheck) -> Check:
    """Recomputing every node's values from its private input and noise reproduces its logs."""
    deviation = trajectories.max_relative_deviation
    detail = f"{trajectories.compared} logged payloads, max relative deviation {deviation:.2g}"
    if trajectories.mismatches:
        shown = "; ".join(mismatch.detail for mismatch in trajectories.mismatches[:SHOWN_MISMATCHES])
        detail += f"; {len(trajectories.mismatches)} not reproduced, first: {shown}"
    return Check(TRAJECTORY_CHECK, trajectories.ok, detail)


def _by_up_to(ratio: float) -> str:
    """How far a closed form is below the exact loss: 'by up to 3x', or in words where the form is 0 there."""
    if np.isfinite(ratio):
        return f"by up to {ratio:.3g}x"
    return "by an unbounded factor: the bound is 0 where the exact loss is not"


def not_applicable(what: str = "pairs") -> str:
    """The detail of a check that had nothing to check: it held, but shows nothing."""
    return f"not applicable (no {what})"


def not_computed_pairs(losses: PairwiseLosses) -> np.ndarray:
    """[u, v]: the pairs u ≠ v with no exact value (NaN: not computed), which no check may count as passing."""
    missing = np.isnan(losses.exact_rdp) | np.isnan(losses.exact_eps)
    return missing & ~np.eye(losses.n, dtype=bool)


def _all_pairs(count: int, missing: np.ndarray, what: str = "pairs") -> str:
    """'all N pairs', or how many of them had an exact value and how many were not computed ('not applicable' for
    none)."""
    if count == 0:
        return not_applicable(what)
    skipped = int(np.count_nonzero(missing))
    if not skipped:
        return f"all {count} {what}"
    if skipped == count:
        return f"none of the {count} {what} (all not computed: no exact value, so not checked)"
    return f"the {count - skipped} of {count} {what} with an exact value ({skipped} not computed, so not checked)"


def _exceeds(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """value > bound beyond rounding (NaN, i.e. no value, never exceeds)."""
    return np.asarray(value > bound * (1.0 + RTOL) + ATOL)


def _pairwise_check(name: str, failed: np.ndarray, value: np.ndarray, bound: np.ndarray, *, passed: str,
                    column: str | None = None, missing: np.ndarray | None = None) -> Check:
    """A check over pairs: ok when no pair failed, else the count and the worst pair; a warning when it held
    only because some pairs (`missing`) had no value to check."""
    count = int(np.count_nonzero(failed))
    if count == 0:
        return Check(name, True, passed, warning=missing is not None and bool(missing.any()))
    gap = np.where(failed, value - bound, -np.inf)
    u, v = np.unravel_index(int(np.argmax(gap)), gap.shape)
    where = f" in {column}" if column else ""
    return Check(name, False, f"{count} pairs fail{where}; worst {u}->{v}: {value[u, v]:.6g} vs {bound[u, v]:.6g}")


def _count(losses: PairwiseLosses) -> int:
    return losses.n * (losses.n - 1)

