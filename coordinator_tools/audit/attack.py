"""The model attack: a distinguishing attack on the audit's own model, run from the observer's seat.

It replays the realized transcript's linear-Gaussian model with fresh simulated noise, so it checks
the exact column's arithmetic against itself; it cannot see a real run that differs from its model
(a node drawing too little noise, say): that is the empirical column's job (`empirical`).

For a pair (u → v): the other inputs are fixed (the view is linear, so they cancel), u's input
is 0 under H0 and Δ along the worst direction under H1 (the noise is isotropic, so every unit
direction is worst and one coordinate suffices). v's rows of the run's linear-Gaussian model
(`core`: y = A x + B η, on what v does not know) are replayed R times per hypothesis with
fresh Gaussian noise. The score is the likelihood ratio, linear for a Gaussian view:
(A e_u)ᵀ (B S² Bᵀ)⁺ y; with one draw per input (A = B = K) that is (K⁺ y)_u, v's
least-squares reconstruction of u's noisy input. The threshold and the test's direction are
chosen on one half of the runs and counted on the other; Clopper–Pearson bounds give
ε_lower = ln((TPR_lower − δ)/FPR_upper) ≥ 0. The bounds of all the pairs attacked together hold
together at CONFIDENCE (Bonferroni over pairs and both sides), so an audit's check that every
model-attack value stays below its exact loss does not fail by chance on a run with many pairs.

This is a simulation, not a node's sampler: a seeded numpy Generator is fine here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from coordinator_tools.audit.core import RANGE_RTOL, LinearGaussianModel
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.progress import tracked
from coordinator_tools.audit.views import ObserverView, observer_view

Pair = tuple[int, int]  # (source u, observer v)

CONFIDENCE = 0.95
DEFAULT_RUNS = 20_000
CANDIDATE_THRESHOLDS = 256
# Scores held in memory at once (sources × runs); more sources are replayed in blocks.
SCORE_BUDGET = 1 << 22


@dataclass(frozen=True)
class AttackResult:
    """The held-out half's verdict for one pair."""

    eps_lower: float
    tpr_lower: float
    fpr_upper: float
    threshold: float
    mirrored: bool  # True: the test says "x_u" (not "x_u + Δ") when the score is low
    runs: int  # per hypothesis, both halves


def attack_pairs(
    model: LinearGaussianModel,
    pairs: Iterable[Pair],
    *,
    sigma: float,
    sensitivity: float,
    delta: float,
    runs: int = DEFAULT_RUNS,
    threat_model: ThreatModel = ThreatModel(),
    rng_seed: int | None = None,
) -> dict[Pair, AttackResult]:
    """Attack every (u, v) in `pairs`, `runs` replays per hypothesis each."""
    if runs < 4:
        raise ValueError(f"need at least 4 runs per hypothesis, got {runs}")
    rng = np.random.default_rng(rng_seed)
    by_observer: dict[int, list[int]] = defaultdict(list)
    for u, v in pairs:
        by_observer[v].append(u)
    confidence = simultaneous_confidence(sum(map(len, by_observer.values())))
    results: dict[Pair, AttackResult] = {}
    for v, sources in tracked(by_observer.items(), "attack: observers", len(by_observer)):
        view = observer_view(model, v, threat_model)
        outsiders = set(sources) - set(view.sources())
        if outsiders:
            raise ValueError(f"nodes {sorted(outsiders)} are not sources for observer {v}")
        column, signal, noise_map, reconstruct = linear_view(model, view)
        block = max(1, SCORE_BUDGET // runs)
        for start in range(0, len(sources), block):
            chunk = sources[start : start + block]
            columns = [column[u] for u in chunk]
            null, alternative = _replay(noise_map, reconstruct[columns], signal[:, columns], sigma, sensitivity,
                                        runs, rng)
            results.update(((u, v), result) for u, result in
                           zip(chunk, _distinguish(null, alternative, delta, confidence)))
    return results


def attack_pair(
    model: LinearGaussianModel,
    source: int,
    observer: int,
    *,
    sigma: float,
    sensitivity: float,
    delta: float,
    runs: int = DEFAULT_RUNS,
    threat_model: ThreatModel = ThreatModel(),
    rng_seed: int | None = None,
) -> AttackResult:
    """Attack the one pair (source → observer)."""
    results = attack_pairs(
        model, [(source, observer)], sigma=sigma, sensitivity=sensitivity, delta=delta, runs=runs,
        threat_model=threat_model, rng_seed=rng_seed,
    )  # fmt: skip
    return results[(source, observer)]


def simultaneous_confidence(pairs: int) -> float:
    """Each pair's confidence so that the bounds of all `pairs` hold together at CONFIDENCE (Bonferroni).

    An audit checks empirical ≤ exact on every pair: at CONFIDENCE per pair, a run with hundreds
    of pairs would show a few pairs above their exact loss by chance alone.
    """
    return 1 - (1 - CONFIDENCE) / max(pairs, 1)


def resolution_limit(runs: int, delta: float, pairs: int = 1) -> float:
    """The largest ε_lower `runs` replays per hypothesis can certify, `pairs` attacked together.

    That is the held-out half perfectly separated: no attack with this many replays can report
    more, whatever the true loss, so a pair whose exact loss is above it is certified at most at it.
    """
    held_out = runs - runs // 2  # `_distinguish` counts the second half
    bound, _, _ = _bound(np.ones((1, held_out)), np.zeros((1, held_out)), np.full((1, 1), 0.5), delta,
                         simultaneous_confidence(pairs))
    return max(0.0, float(bound[0, 0]))


def clopper_pearson(successes: np.ndarray, trials: int, confidence: float = CONFIDENCE
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper–Pearson interval at `confidence` for a binomial proportion."""
    k = np.asarray(successes)
    tail = (1 - confidence) / 2
    lower = np.where(k == 0, 0.0, beta.ppf(tail, np.maximum(k, 1), trials - k + 1))
    upper = np.where(k == trials, 1.0, beta.ppf(1 - tail, k + 1, np.maximum(trials - k, 1)))
    return lower, upper


def linear_view(
    model: LinearGaussianModel, view: ObserverView
) -> tuple[dict[int, int], np.ndarray, np.ndarray, np.ndarray]:
    """(column of each source, signal A e_u per column, noise map B S, score rows per column).

    One draw per input: the columns are the hidden z columns, A = B = K and the scores are
    K⁺'s rows. Otherwise: the columns are the sources and the scores (A e_u)ᵀ (B S² Bᵀ)⁺, except
    where A e_u leaves the noise's range (the view pins x_u down, an infinite exact loss): the
    score is then the part of A e_u the noise never reaches, exactly 0 under H0.
    """
    if model.shared:
        rows = view.rows(model.inputs)
        reconstruct = np.linalg.pinv(rows) if rows.size else np.zeros((rows.shape[1], 0))
        return {k: i for i, k in enumerate(view.hidden)}, rows, rows, reconstruct
    signal, noise_map = view.matrices(model)
    if not signal.size:
        return {u: i for i, u in enumerate(view.sources())}, signal, noise_map, signal.T
    reconstruct = signal.T @ np.linalg.pinv(noise_map @ noise_map.T)
    residual = signal - noise_map @ np.linalg.lstsq(noise_map, signal, rcond=None)[0]
    exposed = np.linalg.norm(residual, axis=0) > RANGE_RTOL * np.linalg.norm(signal, axis=0)
    reconstruct[exposed] = residual[:, exposed].T
    return {u: i for i, u in enumerate(view.sources())}, signal, noise_map, reconstruct


def _replay(
    noise_map: np.ndarray,
    reconstruct: np.ndarray,
    signal: np.ndarray,
    sigma: float,
    sensitivity: float,
    runs: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores (sources × runs) under H0 and H1, from views replayed with fresh noise."""
    draws = noise_map.shape[1]
    null = reconstruct @ (noise_map @ (sigma * rng.standard_normal((draws, runs))))
    shift = sensitivity * np.einsum("ij,ji->i", reconstruct, signal)
    alternative = reconstruct @ (noise_map @ (sigma * rng.standard_normal((draws, runs)))) + shift[:, None]
    return null, alternative


def _distinguish(null: np.ndarray, alternative: np.ndarray, delta: float, confidence: float) -> list[AttackResult]:
    """Per row (one source): pick threshold and direction on the first half of its replays, bound ε on the second.

    Every row is handled at once: per-row quantiles, sorts and counts, no loop over sources or replays.
    """
    sources, runs = null.shape
    half = runs // 2
    candidates = np.quantile(np.concatenate([null[:, :half], alternative[:, :half]], axis=1),
                             np.linspace(0, 1, CANDIDATE_THRESHOLDS), axis=1).T
    picks = []
    for mirrored in (False, True):
        positive, negative, thresholds = _oriented(null[:, :half], alternative[:, :half], candidates, mirrored)
        bound, _, _ = _bound(positive, negative, thresholds, delta, confidence)
        pick = np.argmax(bound, axis=1)
        picks.append((bound[np.arange(sources), pick], candidates[np.arange(sources), pick]))
    (forward, forward_at), (backward, backward_at) = picks
    mirrored = backward > forward  # ties, and no usable threshold at all, stay forward
    threshold = np.where(mirrored, backward_at, np.where(forward > -np.inf, forward_at, 0.0))
    sign = np.where(mirrored, -1.0, 1.0)[:, None]
    positive = np.where(mirrored[:, None], -null[:, half:], alternative[:, half:])
    negative = np.where(mirrored[:, None], -alternative[:, half:], null[:, half:])
    bound, tpr_lower, fpr_upper = _bound(positive, negative, sign * threshold[:, None], delta, confidence)
    return [
        AttackResult(eps_lower=max(0.0, float(bound[i, 0])), tpr_lower=float(tpr_lower[i, 0]),
                     fpr_upper=float(fpr_upper[i, 0]), threshold=float(threshold[i]), mirrored=bool(mirrored[i]),
                     runs=runs)
        for i in range(sources)
    ]


def _oriented(
    null: np.ndarray, alternative: np.ndarray, thresholds: np.ndarray, mirrored: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positives, negatives, thresholds) of the test "score > threshold says positive", rows = sources.

    Forward: H1 is positive. Mirrored: H0 is positive when its score is low (scores negated).
    """
    if mirrored:
        return -null, -alternative, -thresholds
    return alternative, null, thresholds


def _exceeding(samples: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """[i, k] = how many of row i's samples exceed thresholds[i, k] (any order), by one merged sort per row."""
    count = samples.shape[1]
    order = np.argsort(thresholds, axis=1, kind="stable")
    ascending = np.take_along_axis(thresholds, order, axis=1)
    merged = np.argsort(np.concatenate([samples, ascending], axis=1), axis=1, kind="stable")
    is_threshold = merged >= count  # samples come first on ties: a threshold sits after every equal sample
    position = np.nonzero(is_threshold)[1].reshape(thresholds.shape)
    at_most = position - np.arange(thresholds.shape[1])  # samples before it in the merged order
    exceeding = np.empty_like(at_most)
    np.put_along_axis(exceeding, order, count - at_most, axis=1)
    return exceeding


def _bound(
    positive: np.ndarray, negative: np.ndarray, thresholds: np.ndarray, delta: float, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ln((TPR_lower − δ)/FPR_upper) per row and threshold (−∞ where TPR_lower ≤ δ), with the bounds."""
    tpr_lower, _ = clopper_pearson(_exceeding(positive, thresholds), positive.shape[1], confidence)
    _, fpr_upper = clopper_pearson(_exceeding(negative, thresholds), negative.shape[1], confidence)
    margin = tpr_lower - delta
    bound = np.full(thresholds.shape, -np.inf)
    np.log(margin / fpr_upper, out=bound, where=margin > 0)
    return bound, tpr_lower, fpr_upper
