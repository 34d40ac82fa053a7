"""One-run canary statistics (Steinke, Nasr & Jagielski 2023), and the model attack of a learning run.

The statistics (`p_value`, `epsilon_lower`, `guess_levels`) turn a count of correct guesses about
m canaries into a lower bound on ε; the empirical column of a real run uses them (`empirical`).
The rest of this module is the *model attack* of a learning run, a self-check of its exact column:
a learning run draws noise at every step, so instead of replaying one fixed change of u's input
many times (`attack`), the audit simulates m canaries in ONE run of its own model and counts how
many an observer guesses, as Steinke, Nasr & Jagielski ("Privacy auditing with one (1) training
run", NeurIPS 2023) do for DP-SGD. It tests the audit's arithmetic, never the real run. The
noise is isotropic, so every coordinate of the model is an independent copy of the run's
linear-Gaussian system (`core`); coordinate i carries canary i. With
probability 1/2 (S_i = +1) the canary is included: it moves u's input in that coordinate by Δ
along the pair's direction (for a learning run: u's clipped gradient by Δ·d_s at every step s).
Changing one S_i with the others fixed is one adjacent change of u's data, which is what their
theorem needs; every noise draw of the run is fresh.

Observer v (or its coalition, `views`) scores every canary with the likelihood ratio of its
view, (A e_u)ᵀ (B S² Bᵀ)⁺ y (`attack.linear_view`), guesses "included" for its k highest scores
and "excluded" for its k lowest, and abstains on the rest: W of its r = 2k guesses are right.
Their main theorem for approximate DP (§5 of arXiv:2305.08846, p-value as in its Appendix D)
bounds the tail of W for any (ε, δ)-DP mechanism; ε_lower is the largest ε that this p-value
still rejects at the pair's level. The level is Bonferroni's over the pairs of one audit, so that
all the bounds hold together at CONFIDENCE: ε_lower ≤ the true ε on every pair except with
probability 1 − CONFIDENCE.
k is picked on an independent pilot run (the best bound among k = ⌊m/2⌋, ⌊m/4⌋, … over
GUESS_LEVELS halvings) and W is counted on a fresh run: picking k on the counted scores would
void the p-value.

Per source u the noise of its run is drawn once and scored by every observer (one matrix
product); the canary's direction may differ per observer, so each pair sees exactly a run with
its own canaries, coupled to the other pairs only through shared noise, which changes nothing
pair by pair.

This is a simulation, not a node's sampler: a seeded numpy Generator is fine here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, log_expit

from coordinator_tools.audit.attack import CONFIDENCE, SCORE_BUDGET, Pair, linear_view, simultaneous_confidence
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.views import observer_view

DEFAULT_CANARIES = 1000
# The pilot tries k = ⌊m/2⌋, ⌊m/4⌋, … guesses on each side: this many halvings.
GUESS_LEVELS = 7
# ε_lower is found by bisection to this absolute precision (the low end is returned).
EPS_TOLERANCE = 1e-6
# Entries of binomial tables held at once (queries × outcomes); more queries are computed in blocks.
TABLE_BUDGET = 1 << 22


@dataclass(frozen=True)
class CanaryResult:
    """One pair's counted run: W right out of r guesses among m canaries, and the bound they give."""

    eps_lower: float
    guesses: int  # r = 2k
    correct: int  # W
    canaries: int  # m


def canary_audit(
    observer_model: Callable[[int], LinearGaussianModel],
    pairs: Iterable[Pair],
    *,
    sigma: float,
    sensitivity: float,
    delta: float,
    canaries: int = DEFAULT_CANARIES,
    threat_model: ThreatModel = ThreatModel(),
    rng_seed: int | None = None,
) -> dict[Pair, CanaryResult]:
    """Audit every (u, v) in `pairs` with m = `canaries` canaries at u: one pilot and one counted run per u.

    `observer_model(v)` is the run as observer v's canaries move it: input column u is the change
    one canary of the pair (u, v) makes in its coordinate (for a learning run, u's gradients along
    the pair's worst sign direction). The noise columns must be the same for every observer.
    """
    levels = guess_levels(canaries)
    order, weights, shifts = _score_maps(observer_model, pairs, threat_model)
    sources = np.array([u for u, _ in order], dtype=int)
    confidence = simultaneous_confidence(len(order))
    run = partial(_correct_guesses, weights, shifts, sources, sigma=sigma, sensitivity=sensitivity,
                  canaries=canaries, levels=levels, rng=np.random.default_rng(rng_seed))
    pilot = epsilon_lower(canaries, 2 * levels, run(), delta, confidence)
    choice = np.argmax(pilot, axis=1)  # the first best: the most guesses among equal bounds
    counted = run()[np.arange(choice.size), choice]
    guesses = 2 * levels[choice]
    bounds = epsilon_lower(canaries, guesses, counted, delta, confidence)
    return {pair: CanaryResult(float(eps), int(r), int(w), canaries)
            for pair, eps, r, w in zip(order, bounds, guesses, counted)}


def guess_levels(canaries: int) -> np.ndarray:
    """The pilot's candidate guess counts k per side, largest first: ⌊m/2⌋, ⌊m/4⌋, … (at least 1)."""
    if canaries < 2:
        raise ValueError(f"need at least 2 canaries, got {canaries}")
    levels = canaries // 2 ** np.arange(1, GUESS_LEVELS + 1)
    return np.unique(levels[levels >= 1])[::-1]


def p_value(canaries: int, guesses: ArrayLike, correct: ArrayLike, eps: ArrayLike, delta: float) -> np.ndarray:
    """Steinke et al.'s p-value of W = `correct` right out of r = `guesses` among m canaries under (ε, δ)-DP.

    q = e^ε/(1 + e^ε) (ε-DP randomized response's accuracy), β = P[Bin(r, q) ≥ W],
    α = max_{1≤i≤W} P[W − i ≤ Bin(r, q) < W]/i, p = min(1, β + 2mδα). Broadcasts its arrays.
    """
    shape = np.broadcast_shapes(np.shape(guesses), np.shape(correct), np.shape(eps))
    r, w = (np.broadcast_to(np.asarray(x, dtype=int), shape).ravel() for x in (guesses, correct))
    e = np.broadcast_to(np.asarray(eps, dtype=float), shape).ravel()
    if np.any((w < 0) | (w > r) | (r > canaries)) or np.any(e < 0) or not 0 <= delta <= 1:
        raise ValueError("need 0 <= correct <= guesses <= canaries, eps >= 0 and 0 <= delta <= 1")
    p = np.empty(r.shape)
    for total in np.unique(r):
        queries = np.flatnonzero(r == total)
        block = max(1, TABLE_BUDGET // (total + 2))
        for start in range(0, queries.size, block):
            chunk = queries[start : start + block]
            p[chunk] = _p_value_block(canaries, int(total), w[chunk], e[chunk], delta)
    return p.reshape(shape)


def epsilon_lower(canaries: int, guesses: ArrayLike, correct: ArrayLike, delta: float,
                  confidence: float = CONFIDENCE) -> np.ndarray:
    """sup{ε : p_value(ε) ≤ 1 − confidence}, to EPS_TOLERANCE from below; 0 when even ε = 0 is not rejected.

    Bisection keeps p(low) ≤ level < p(high), so the returned low end is rejected itself: a valid
    bound even where p is not monotone in ε. W ≤ r/2 gives 0 (p(0) ≥ P[Bin(r, 1/2) ≥ r/2] ≥ 1/2).
    """
    level = 1 - confidence
    shape = np.broadcast_shapes(np.shape(guesses), np.shape(correct))
    queries = np.stack([np.broadcast_to(np.asarray(x, dtype=int), shape).ravel() for x in (guesses, correct)])
    (r, w), inverse = np.unique(queries, axis=1, return_inverse=True)
    low, high = np.zeros(r.size), np.ones(r.size)
    active = p_value(canaries, r, w, low, delta) <= level
    while np.any(grow := active & (p_value(canaries, r, w, high, delta) <= level)):
        low[grow], high[grow] = high[grow], 2 * high[grow]
    while np.any(wide := active & (high - low > EPS_TOLERANCE)):
        index = np.flatnonzero(wide)
        middle = (low[index] + high[index]) / 2
        rejected = p_value(canaries, r[index], w[index], middle, delta) <= level
        low[index[rejected]], high[index[~rejected]] = middle[rejected], middle[~rejected]
    return np.where(active, low, 0.0)[inverse.ravel()].reshape(shape)


def _p_value_block(canaries: int, total: int, correct: np.ndarray, eps: np.ndarray, delta: float) -> np.ndarray:
    """p_value for queries that share r = `total`: one row of Bin(r, q) tail probabilities per query."""
    outcomes = np.arange(total + 1)
    log_choose = gammaln(total + 1) - gammaln(outcomes + 1) - gammaln(total - outcomes + 1)
    log_pmf = log_choose + outcomes * log_expit(eps)[:, None] + (total - outcomes) * log_expit(-eps)[:, None]
    tail = np.zeros((eps.size, total + 2))  # tail[:, x] = P[Bin(r, q) ≥ x]
    tail[:, : total + 1] = np.cumsum(np.exp(log_pmf)[:, ::-1], axis=1)[:, ::-1]
    rows = np.arange(eps.size)
    beta = tail[rows, correct]
    steps = np.arange(1, total + 1)
    below = correct[:, None] - steps  # W − i
    windows = tail[rows[:, None], np.maximum(below, 0)] - beta[:, None]  # P[W − i ≤ Bin < W]
    alpha = np.max(np.where(below >= 0, windows / steps, 0.0), axis=1, initial=0.0)
    return np.minimum(1.0, beta + 2 * canaries * delta * alpha)


def _score_maps(
    observer_model: Callable[[int], LinearGaussianModel], pairs: Iterable[Pair], threat_model: ThreatModel
) -> tuple[list[Pair], np.ndarray, np.ndarray]:
    """Each pair's score as a map of the run: (pairs sorted by source, weights per noise column, shifts).

    v's likelihood-ratio score of a canary is wᵀ(σ ξ) + Δ·shift·[included], ξ the run's standard
    normal draws, w = (A e_u)ᵀ(B S² Bᵀ)⁺ B S on the draws v does not know (0 on those it knows).
    """
    by_observer: dict[int, list[int]] = defaultdict(list)
    for u, v in pairs:
        by_observer[v].append(u)
    maps: dict[Pair, tuple[np.ndarray, float]] = {}
    draws = 0
    for v, sources in by_observer.items():
        model = observer_model(v)
        view = observer_view(model, v, threat_model)
        outsiders = set(sources) - set(view.sources())
        if outsiders:
            raise ValueError(f"nodes {sorted(outsiders)} are not sources for observer {v}")
        column, signal, noise_map, reconstruct = linear_view(model, view)
        columns = [column[u] for u in sources]
        draws = len(model.owners)
        weights = np.zeros((len(sources), draws))
        weights[:, view.unknown_draws(model)] = reconstruct[columns] @ noise_map
        shifts = np.einsum("ij,ji->i", reconstruct[columns], signal[:, columns])
        maps.update({(u, v): (row, shift) for u, row, shift in zip(sources, weights, shifts)})
    order = sorted(maps)
    weights = np.array([maps[pair][0] for pair in order]).reshape(len(order), draws)
    return order, weights, np.array([maps[pair][1] for pair in order])


def _correct_guesses(
    weights: np.ndarray,
    shifts: np.ndarray,
    sources: np.ndarray,
    *,
    sigma: float,
    sensitivity: float,
    canaries: int,
    levels: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """One simulated run per source: W of every pair (rows sorted by source) for every k in `levels`.

    Guessing "included" for the k highest scores and "excluded" for the k lowest (k ≤ m/2, so
    they never overlap) makes W(k) = #included among the top k + #excluded among the bottom k.
    The noise is drawn in blocks of canaries (SCORE_BUDGET draws at once).
    """
    draws = weights.shape[1]
    block = max(1, SCORE_BUDGET // max(draws, 1))
    correct = np.empty((shifts.size, levels.size), dtype=int)
    _, starts = np.unique(sources, return_index=True)
    for rows in map(slice, starts, [*starts[1:], sources.size]):
        included = rng.random(canaries) < 0.5
        scores = sensitivity * shifts[rows, None] * included
        for start in range(0, canaries, block):
            part = slice(start, min(start + block, canaries))
            scores[:, part] += sigma * (weights[rows] @ rng.standard_normal((draws, part.stop - start)))
        ranked = included[np.argsort(scores, axis=1)]  # lowest score first
        excluded_low = np.cumsum(~ranked, axis=1)[:, levels - 1]
        included_high = np.cumsum(ranked[:, ::-1], axis=1)[:, levels - 1]
        correct[rows] = excluded_low + included_high
    return correct


def canary_column(observer_model: Callable[[int], LinearGaussianModel], pairs: Iterable[Pair],
                  options: Mapping[str, Any], *, canaries: int, seed: int | None) -> np.ndarray:
    """The report's model-attack column: each attacked pair's ε_lower at the options' σ, Δ and δ, [u, v],
    NaN elsewhere."""
    results = canary_audit(observer_model, pairs, sigma=options["sigma"], sensitivity=options["sensitivity"],
                           delta=options["delta"], canaries=canaries,
                           threat_model=options.get("threat_model", ThreatModel()), rng_seed=seed)
    n = observer_model(0).n
    empirical = np.full((n, n), np.nan)
    for (u, v), result in results.items():
        empirical[u, v] = result.eps_lower
    return empirical


def canary_note(canaries: int, seed: int | None, *, direction: str) -> str:
    """The report's note on how the model-attack column was obtained."""
    levels = ", ".join(str(k) for k in guess_levels(canaries))
    return (f"model attack: canaries simulated on the audit's own model (Steinke, Nasr & Jagielski 2023), {canaries} "
            f"canaries per source node along {direction}, one simulated run; each observer guesses its k highest "
            f"and k lowest likelihood-ratio scores (k in {{{levels}}}, picked on an independent pilot run); "
            f"their (eps, delta) p-value, every pair's bound holding together at {CONFIDENCE:.0%} (Bonferroni), "
            f"seed {seed}")
