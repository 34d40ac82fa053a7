"""The empirical column: a one-run canary audit of the real run (Steinke, Nasr & Jagielski, NeurIPS 2023).

A run made with `netdp run --canaries M` appends M canary coordinates to every vector; each node
puts a_w·s_{w,i} there in every contribution (`node.canaries`: s a secret fair sign per
coordinate, logged in the node's private log only; a_w = Δ/2, so flipping one sign is one
adjacent change of w's data). Nothing else enters those coordinates but the nodes' real noise, so
each message's canary block is, if the run is what the audit's model says,

    y_i = planted · c_i + B · (σ S ξ_i)      (canary coordinate i, one row per message)

with c_{w,i} = a_w s_{w,i}, `planted` and B the protocol's own rows (`CanaryModel`).

For a pair (u → v) the observer scores canary i from the canary blocks of the messages in its
logged view, never from a private log: the likelihood-ratio direction of u's canary against the
noise and every other node's canaries (random signs of known size), after projecting out what v
knows itself (its own canaries and, by default, its own noise), w = P (P Σ P)⁺ P k_u. Any value in
v's view that no row of the model accounts for (a message outside the protocol) is added to the
score too, standardised: the observer uses everything that reached it. It guesses "+" for its k
highest scores and "−" for its k lowest; W of the 2k guesses are right, and Steinke et al.'s
p-value turns W into ε_lower, every pair's bound holding together at 95% (Bonferroni). k is chosen
on a pilot run simulated from the model, independent of the real run (choosing it on the counted
scores would void the p-value). This tests the implementation, not the model: a node that drew too
little noise, skipped a step or sent what it should not have moves the real scores, whatever the
model says.

Two checks read the same canary blocks with every node's signs (the auditor's knowledge, not an
observer's): the residual y_i − planted·c_i of every message is pure noise, so its spread over the
M coordinates must match the model's (a χ² test per message for Gaussian noise, tail bounds for
Laplace noise, Bonferroni over messages), and the spread of every node's noise is estimated from
all messages at once, so a failing check names the node that drew too little.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import nnls
from scipy.stats import chi2

from coordinator_tools.audit.attack import CONFIDENCE, simultaneous_confidence
from coordinator_tools.audit.canary import epsilon_lower, guess_levels
from coordinator_tools.audit.checks import Check
from coordinator_tools.audit.core import RANGE_RTOL, LinearGaussianModel
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.records import MessageKey, NodeLog
from coordinator_tools.audit.views import observer_view
from node.codec import from_tensor

Pair = tuple[int, int]
NoiseLaw = Literal["gaussian", "laplace"]
NOISE_CHECK = "noise in the run's messages is the published noise (canaries)"
NOISE_FALSE_ALARM = 1e-4  # the chi-square noise check fails an honest run with at most this probability
# A node's noise std, estimated from the canary coordinates, is reported when it is off by more than this share.
SCALE_REPORT_RTOL = 0.1
SHOWN = 3


@dataclass(frozen=True)
class CanaryModel:
    """A run as its canary coordinates see it: the model's rows, the canaries they carry, the values they are.

    Row j of `model` is a value some observer received: its canary block is
    `scale` · (planted[j] · c + noise_rows[j] · (σ·scales·ξ)). labels[j] names that value the way
    `label_of` names a logged message (the protocol's own naming: a round and its sender, an exchange
    and its sender, a token's prefix); `label_of` gives None for a message that carries no value of
    the protocol, whatever it holds.
    """

    model: LinearGaussianModel
    planted: np.ndarray  # (rows, n): the coefficient of node w's canary value in each row
    labels: tuple[Hashable, ...]
    label_of: Callable[[MessageKey], Hashable | None]
    scale: float = 1.0
    noise: NoiseLaw = "gaussian"  # the law of every noise column: the scores and the pilot use only its spread


@dataclass(frozen=True)
class PlantedCanaries:
    """Every node's canary signs and the size of one canary, from the private logs (None: not readable)."""

    signs: Mapping[int, np.ndarray]
    magnitudes: Mapping[int, float]
    count: int

    def values(self, n: int, default_magnitude: float) -> tuple[np.ndarray, np.ndarray]:
        """(c: n × M canary values, 0 where unknown; a: n magnitudes, `default_magnitude` where unknown)."""
        values = np.zeros((n, self.count))
        magnitudes = np.full(n, default_magnitude)
        for node, signs in self.signs.items():
            values[node] = self.magnitudes[node] * signs
            magnitudes[node] = self.magnitudes[node]
        return values, magnitudes


@dataclass(frozen=True)
class CanaryAudit:
    """The empirical column and what it was computed from."""

    eps_lower: np.ndarray  # [u, v], NaN where no pair was audited
    guesses: np.ndarray  # [u, v] 2k, 0 where not audited
    correct: np.ndarray  # [u, v] W
    canaries: int
    limit_eps: float  # the largest ε_lower M canaries can certify for this many pairs: every guess right
    checks: list[Check]
    outside: list[tuple[int | None, int, MessageKey]]  # (claimed sender, receiver, key) of values no row accounts for
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The report's `canaries` block (SCHEMA.md)."""
        audited = ~np.isnan(self.eps_lower)
        return {
            "canaries": self.canaries,
            "pairs": int(np.count_nonzero(audited)),
            "confidence": CONFIDENCE,
            "limit_eps": self.limit_eps,
            "reason": None,
            "values_outside_the_model": [
                {"sender": sender, "receiver": receiver, "kind": key.kind} for sender, receiver, key in self.outside],
            "notes": self.notes,
        }


def planted_canaries(signs: Mapping[int, np.ndarray], magnitudes: Mapping[int, float], count: int) -> PlantedCanaries:
    """The signs the private logs hold, each checked to be M fair signs."""
    for node, values in signs.items():
        if values.shape != (count,) or not np.all(np.abs(values) == 1.0):
            raise ValueError(f"node {node}'s private log holds {values.size} canary signs, not {count} values of +-1")
    return PlantedCanaries(signs, magnitudes, count)


def canary_audit(canary_model: CanaryModel, logs: Mapping[int, NodeLog], planted: PlantedCanaries, *,
                 dimension: int, sigma: float, sensitivity: float, delta: float,
                 threat_model: ThreatModel = ThreatModel(), seed: int | None = None) -> CanaryAudit:
    """Score every pair (u, v) from v's logged canary blocks, count the guesses, bound ε; and check the noise.

    Each pair is one test, with the k its pilot chose; a value outside the model that u may have sent
    is a further test of the pair at every k (its noise is nobody's to simulate), and the pair's bound is
    its best test's. The tests' bounds hold together at 95% (Bonferroni over all of them).
    """
    model = canary_model.model
    n, count = model.n, planted.count
    values, magnitudes = planted.values(n, sensitivity / 2.0)
    blocks, outside = _observed(canary_model, logs, dimension, count)
    tests: dict[Pair, list[tuple[np.ndarray, np.ndarray]]] = {}  # per pair: (scores, the k to try)
    pilots: dict[Pair, tuple[np.ndarray, np.ndarray]] = {}
    rng = np.random.default_rng(seed)
    for v in range(n):
        rows = [j for j in model.received[v] if j in blocks.get(v, {})]
        if not rows:
            continue
        sources = [u for u in observer_view(model, v, threat_model).sources() if u in planted.signs]
        weights = _score_weights(canary_model, rows, v, sources, magnitudes, sigma, threat_model)
        real = weights.T @ np.array([blocks[v][j] for j in rows])
        simulated, signs = _simulated_blocks(canary_model, rows, magnitudes, sigma, count, rng)
        pilot = weights.T @ simulated
        for i, u in enumerate(sources):
            tests[u, v] = [(real[i], np.zeros(0, dtype=int)), *_outside_tests(outside.get(v, ()), u, count)]
            pilots[u, v] = (pilot[i], signs[u])
    confidence = simultaneous_confidence(sum(max(len(ks), 1) for found in tests.values() for _, ks in found))
    eps_lower = np.full((n, n), np.nan)
    guesses, correct = np.zeros((n, n), dtype=int), np.zeros((n, n), dtype=int)
    for (u, v), found in sorted(tests.items()):
        found[0] = (found[0][0], np.array([_pilot_guesses(*pilots[u, v], delta, confidence)]))
        for scores, levels in found:
            for k in levels:
                right = _correct(scores, planted.signs[u], int(k))
                bound = float(epsilon_lower(count, 2 * int(k), right, delta, confidence))
                if np.isnan(eps_lower[u, v]) or bound > eps_lower[u, v]:
                    eps_lower[u, v], guesses[u, v], correct[u, v] = bound, 2 * int(k), right
    limit = float(epsilon_lower(count, count - count % 2, count - count % 2, delta, confidence)) if tests else 0.0
    checks = [noise_check(canary_model, blocks, values, planted, sigma)]
    flat_outside = [(key.peer, receiver, key) for receiver, found in sorted(outside.items()) for key, _ in found]
    notes = [f"empirical: one-run canary audit of the real run (Steinke, Nasr & Jagielski 2023), {count} canaries "
             f"per node in the appended canary coordinates, scored from each observer's logged view; guesses chosen "
             f"on a pilot simulated from the model (k in {{{', '.join(map(str, guess_levels(count)))}}}), all "
             f"bounds together at {CONFIDENCE:.0%}"]
    return CanaryAudit(eps_lower, guesses, correct, count, limit, checks, flat_outside, notes)


def _observed(canary_model: CanaryModel, logs: Mapping[int, NodeLog], dimension: int, count: int
              ) -> tuple[dict[int, dict[int, np.ndarray]], dict[int, list[tuple[MessageKey, np.ndarray]]]]:
    """Per observer: the canary block (in model units) of every model row it logged, and the values it logged
    that no row accounts for (with their canary blocks, or empty where the value has none)."""
    model = canary_model.model
    blocks: dict[int, dict[int, np.ndarray]] = {}
    outside: dict[int, list[tuple[MessageKey, np.ndarray]]] = {}
    for v, log in logs.items():
        wanted = {canary_model.labels[j]: j for j in model.received[v]}
        values = [*log.values_in_view().items(),
                  *((MessageKey.of(entry, None if entry.claimed_sender < 0 else int(entry.claimed_sender)),
                     entry.payload) for entry in log.unaccounted)]
        for key, tensor in values:
            label = canary_model.label_of(key)
            j = None if label is None else wanted.get(label)
            value = from_tensor(tensor)
            block = value[dimension: dimension + count] if value.size == dimension + count else np.zeros(0)
            if j is None:
                outside.setdefault(v, []).append((key, block))
            elif block.size:
                blocks.setdefault(v, {})[j] = block / canary_model.scale
    return blocks, outside


def _score_weights(canary_model: CanaryModel, rows: Sequence[int], observer: int, sources: Sequence[int],
                   magnitudes: np.ndarray, sigma: float, threat_model: ThreatModel) -> np.ndarray:
    """Weights (rows × sources): the likelihood-ratio direction of each source's canary against the noise and
    the other nodes' canaries, what the observer knows itself projected out.

    The other canaries' covariance includes u's own: by Sherman–Morrison that leaves u's direction
    unchanged, so one inverse serves every source of the observer."""
    model = canary_model.model
    view = observer_view(model, observer, threat_model)
    planted = canary_model.planted[list(rows)]
    noise = model.noise_rows[list(rows)] * model.scales
    held = np.ones(noise.shape[1], dtype=bool)
    held[view.unknown_draws(model)] = False
    known = [planted[:, view.known_inputs], noise[:, held]]
    noise = noise[:, ~held]
    others = [w for w in range(model.n) if w not in view.known_inputs]
    covariance = sigma**2 * noise @ noise.T + (planted[:, others] * magnitudes[others]) @ planted[:, others].T
    projector = _complement(np.hstack(known))
    signal = projector @ planted[:, list(sources)]
    reduced = projector @ covariance @ projector
    weights: np.ndarray = np.linalg.pinv(reduced, hermitian=True) @ signal
    residual = signal - reduced @ np.linalg.lstsq(reduced, signal, rcond=None)[0]
    exposed = np.linalg.norm(residual, axis=0) > RANGE_RTOL * np.maximum(np.linalg.norm(signal, axis=0), 1e-300)
    weights[:, exposed] = residual[:, exposed]  # the view pins u's canary down: the noiseless direction decides
    return weights


def _complement(known: np.ndarray) -> np.ndarray:
    """The orthogonal projector onto the complement of the span of `known`'s columns."""
    rows = known.shape[0]
    if known.size == 0 or not np.any(known):
        return np.eye(rows)
    basis, singular, _ = np.linalg.svd(known, full_matrices=False)
    basis = basis[:, singular > singular[0] * max(known.shape) * np.finfo(float).eps]
    array: np.ndarray = np.eye(rows) - basis @ basis.T
    return array


def _outside_tests(found: Sequence[tuple[MessageKey, np.ndarray]], source: int, count: int
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The further tests of a source's canaries: every value outside the model that claims the source as its
    sender (or names none) and carries canary coordinates, its block as the score, tried at every k."""
    return [(block, guess_levels(count)) for key, block in found if key.peer in (None, source) and block.size]


def _simulated_blocks(canary_model: CanaryModel, rows: Sequence[int], magnitudes: np.ndarray, sigma: float,
                      count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Canary blocks of `rows` as the model says they are, from fresh simulated signs and noise (the pilot),
    and those signs (n × M)."""
    model = canary_model.model
    signs = np.where(rng.random((model.n, count)) < 0.5, -1.0, 1.0)
    noise = model.noise_rows[list(rows)] * model.scales
    blocks = (canary_model.planted[list(rows)] * magnitudes) @ signs + sigma * noise @ rng.standard_normal(
        (noise.shape[1], count))
    return blocks, signs


def _pilot_guesses(scores: np.ndarray, signs: np.ndarray, delta: float, confidence: float) -> int:
    """k, the guesses each way, that does best on the pilot run (the most guesses among equal bounds)."""
    levels = guess_levels(scores.size)
    right = np.array([_correct(scores, signs, k) for k in levels])
    return int(levels[int(np.argmax(epsilon_lower(scores.size, 2 * levels, right, delta, confidence)))])


def _correct(scores: np.ndarray, signs: np.ndarray, k: int) -> int:
    """Right guesses of "+" for the k highest scores and "−" for the k lowest."""
    order = np.argsort(scores, kind="stable")
    return int(np.count_nonzero(signs[order[:k]] < 0) + np.count_nonzero(signs[order[-k:]] > 0))


def noise_check(canary_model: CanaryModel, blocks: Mapping[int, Mapping[int, np.ndarray]], values: np.ndarray,
                planted: PlantedCanaries, sigma: float) -> Check:
    """Every message's canary residual (its block minus the canaries it carries) has the model's noise spread.

    Per message j, Σ_i r_ji² / (σ² Σ_k B_jk² s_k²) is χ² with M degrees of freedom if the run is the model
    and its noise Gaussian; for Laplace noise (`CanaryModel.noise`) no such law holds, and each tail's
    p-value is bounded instead (`laplace_tails`). Both tails are tested, Bonferroni over the messages
    checked. Only messages whose canaries are all known (every planting node's private log read) are
    checked. The detail names the nodes whose noise std, estimated from all checked messages at once
    (non-negative least squares on the messages' variances), is off by more than SCALE_REPORT_RTOL.
    """
    model = canary_model.model
    rows: dict[int, np.ndarray] = {}
    receivers: dict[int, int] = {}
    for receiver, observed in blocks.items():
        rows.update(observed)
        receivers.update(dict.fromkeys(observed, receiver))
    known = set(planted.signs)
    checked = sorted(j for j in rows if set(np.flatnonzero(canary_model.planted[j])) <= known)
    noise = model.noise_rows * model.scales
    expected = sigma**2 * np.sum(np.square(noise[checked]), axis=1) if checked else np.zeros(0)
    residuals = np.array([rows[j] - canary_model.planted[j] @ values for j in checked]).reshape(len(checked), -1)
    measured = np.mean(np.square(residuals), axis=1) if checked else np.zeros(0)
    testable = expected > 0
    if not np.any(testable):
        return Check(NOISE_CHECK, True, "not computed: no message with noise carries only known canaries")
    if canary_model.noise == "laplace":
        tail = laplace_tails(measured[testable], sigma * noise[checked][testable], planted.count)
        test = f"tail bounds for Laplace noise over {planted.count} coordinates"
    else:
        statistic = planted.count * measured[testable] / expected[testable]
        tail = np.minimum(chi2.cdf(statistic, planted.count), chi2.sf(statistic, planted.count))
        test = f"chi-square over {planted.count} coordinates"
    # The exact chi-square law gets a strict false-alarm rate (an honest run must not fail for luck); the Laplace
    # tails are bounds, whose true false-alarm rate is already far below the nominal one.
    false_alarm = 1 - CONFIDENCE if canary_model.noise == "laplace" else NOISE_FALSE_ALARM
    level = false_alarm / 2 / tail.size
    failed = tail < level
    ratio = np.sqrt(measured[testable] / expected[testable])
    scales = _node_scales(noise[checked][testable], model.owners, measured[testable], sigma, model.n)
    odd = [(w, s) for w, s in enumerate(scales) if np.isfinite(s) and abs(s - 1.0) > SCALE_REPORT_RTOL]
    estimate = ("; noise std per node, estimated from the canary coordinates: " +
                ", ".join(f"node {w} {s:.2f}x the published" for w, s in sorted(odd, key=lambda x: x[1])[:SHOWN])
                if odd else "")
    untested = _untested(scales, model.owners)
    if not np.any(failed):
        return Check(NOISE_CHECK, True, f"{tail.size} messages' canary coordinates carry the model's noise "
                     f"(std between {ratio.min():.3g}x and {ratio.max():.3g}x of it; {test}, together at "
                     f"{1 - false_alarm:.2%}){untested}")
    worst = int(np.argmin(tail))
    row = int(np.asarray(checked)[testable][worst])
    return Check(NOISE_CHECK, False, f"{int(np.count_nonzero(failed))} of {tail.size} messages carry noise "
                 f"the run's model does not: the worst, value {canary_model.labels[row]} received by node "
                 f"{receivers[row]}, has {ratio[worst]:.3g}x the "
                 f"noise std the model says (p = {tail[worst]:.2g}){estimate or '; no node stands out'}{untested}")


def _untested(scales: np.ndarray, owners: Sequence[int]) -> str:
    """The nodes that drew noise no checked message carries (an agent whose broadcasts reached nobody), named so
    that a pass is not read as covering them; empty when every noise-drawing node was tested."""
    unheard = sorted({int(w) for w in owners if not np.isfinite(scales[w])})
    if not unheard:
        return ""
    nodes = ", ".join(map(str, unheard[:SHOWN])) + (f" and {len(unheard) - SHOWN} more" if len(unheard) > SHOWN else "")
    return f"; not tested: the noise of node {nodes}, which no checked message carries"


def laplace_tails(measured: np.ndarray, spreads: np.ndarray, count: int) -> np.ndarray:
    """Bounds on both tails' p-values of each message's mean square over `count` i.i.d. coordinates, each a sum
    of independent Laplace draws of std spreads[j, k]: the lower tail (too little noise) by the bound for a mean of
    non-negative variables, P(mean <= v - t) <= exp(-M t² / (2 E[r⁴])), the upper by Cantelli's inequality; with
    v = E[r²] = Σ_k s_k² and E[r⁴] = 3v² + 3 Σ_k s_k⁴ (a Laplace draw of std s has fourth cumulant 3s⁴)."""
    variance = np.sum(np.square(spreads), axis=1)
    fourth = 3.0 * variance**2 + 3.0 * np.sum(spreads**4, axis=1)
    deviation = measured - variance
    lower = np.where(deviation < 0, np.exp(-count * deviation**2 / (2.0 * fourth)), 1.0)
    variance_of_mean = (fourth - variance**2) / count
    upper = np.where(deviation > 0, variance_of_mean / (variance_of_mean + deviation**2), 1.0)
    return np.minimum(lower, upper)


def _node_scales(noise: np.ndarray, owners: Sequence[int], measured: np.ndarray, sigma: float, n: int) -> np.ndarray:
    """Each node's noise std as a multiple of the model's, fitted to the messages' measured variances (NaN for a
    node whose noise no checked message carries): variance_j = σ² Σ_w f_w² Σ_{k of w} B_jk²."""
    per_node = np.zeros((noise.shape[0], n))
    np.add.at(per_node.T, np.asarray(owners), np.square(noise).T)
    weight = 1.0 / np.maximum(sigma**2 * per_node.sum(axis=1), np.finfo(float).tiny)  # relative errors
    squared, _ = nnls(per_node * sigma**2 * weight[:, None], measured * weight)
    heard = per_node.sum(axis=0) > 0
    return np.where(heard, np.sqrt(squared), np.nan)
