"""Account a ring histogram (PAbD Alg. 2): exact privacy loss of each observer's view by enumeration.

Observer v sees count vectors: the token at each of its visits and the result. Consecutive
values it saw differ by the answers added in between (its own included), so its view is,
besides what it drew itself, one count vector per *window* between two values it saw; windows
hold disjoint answers and are independent. Windows without an answer of source u are the same
under both hypotheses and drop out. In a window with u's answers, what hides them is:

* the m = ⌈γn⌉ uniform initial elements (first window), unless v originated them and knows its
  own draws (the threat model's default);
* the RR_γ answers of every other node in the window (and v's own when it does not know its
  draws), with their true inputs fixed: the worst case over those inputs is taken, enumerating
  every assignment of categories to them (up to exchanging nodes that sit in the same windows;
  the categories are those of u's two inputs, 0 and 1 by symmetry, and as many others as there
  are hiding nodes, at most L − 2);
* v learns nothing about who held a hop no log names: such an answer is taken as known to v.

For each assignment the two count-vector distributions of every window (u holding 0, or 1) are
enumerated exactly, merged into privacy-loss atoms (log P/Q, rounded to 1e-10, with their P and Q
masses), composed over the windows, and ε at δ is read off the hockey-stick divergence
δ(ε) = Σ max(0, P − e^ε Q) (solved exactly between atoms); Rényi divergence at α the same way. The
column is the largest over assignments.

The enumeration's size is estimated before it starts (`enumeration_sizes`): for every assignment,
each window's distribution built element by element (L·C(e + L, L) count vectors for e elements)
and the windows' joint outcomes (the product of their C(e + L − 1, L − 1) count vectors), which
bounds the work of both steps. A pair beyond ENUMERATION_LIMIT is refused up front: its exact
columns are NaN ("not computed"), its estimated size is kept (`exact_enumeration_size`) and a note
says why. The windows' part needs only each window's element count, the same for every source, so
a large ring is refused at the cost of counting, never left running.

ldp: all of u's K_u answers seen directly (the K_u-fold composition of RR_γ, same atoms); for one
answer its ε is ln(1 + L(1−γ)/γ) up to δ (ln((1 − γ + γ/L − δ)/(γ/L)) at δ). Every view above is a
randomization of u's answers, so exact ≤ ldp holds for every pair.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Unpack

import numpy as np
from scipy.special import gammaln

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.token_sum.accountant import notes as describe
from coordinator_tools.audit.protocols.token_sum.paper import paper_bound
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.report import json_number
from node.protocols.ring_histogram import initial_elements, rr_epsilon

# Count vectors one pair's enumeration may visit, estimated before it starts (about a second of work).
ENUMERATION_LIMIT = 100_000
SIZE_FACT = "exact_enumeration_size"  # the pairs file's column of those estimates
SHOWN_REFUSALS = 20  # refused pairs the report names, smallest estimate first
LOG_RATIO_DECIMALS = 10  # privacy-loss atoms closer than this are merged
Atoms = dict[float, tuple[float, float]]  # rounded ln(P/Q) -> (P mass, Q mass)

NOTES = (
    "ring-histogram: the report's sigma is gamma, the probability that RR_gamma replaces an answer by a uniform "
    "category (the noise level; re-accounted at 2 gamma, capped at 1, for the monotonicity check), sensitivity 1: "
    "one node's category replaced by another",
    "paper: PAbD Thm 2 by its proof, the same eps' for every pair at the report's delta (delta split between K "
    "windows and delta' at the composed bound's minimum, see paper.split), each window "
    "12 eps0 sqrt(ln(1/delta_w)/n)-DP by Erlingsson et al.'s Cor. 9 for RR_gamma's eps0 = ln(1 + L(1-gamma)/gamma); "
    "the statement's value at the same split is paper.stated (its gamma formula swaps the corollary's eps0 and "
    "eps); no RDP",
    "exact (realized path): the count vectors the observer saw, by window between two of them; what hides the "
    "source's answers is the uniform initial elements and the other nodes' RR answers in its windows, whose inputs "
    "are fixed at their worst case (every assignment enumerated); exact (eps, delta) from the enumerated privacy "
    "loss distribution's hockey-stick divergence, RDP at alpha from the same atoms",
    "ldp: every answer of the source seen directly, the K-fold composition of RR_gamma (for one answer "
    "ln(1 + L(1-gamma)/gamma) up to delta); central: none for the histogram (null); empirical: no attack runs on "
    "ring-histogram",
)


@dataclass(frozen=True)
class Window:
    """One stretch between two token values an observer saw, as far as a source's loss goes."""

    sources: int  # the source's answers in it
    uniform: int  # uniform elements the observer did not draw (the initial ones)
    hiding: tuple[int, ...]  # one entry per answer the observer did not draw: the node that gave it


@dataclass(frozen=True)
class PairView:
    """What hides the source's answers from an observer: the windows holding some, and whether all are seen."""

    windows: tuple[Window, ...]
    unseen: int  # the source's answers after the observer's last value: never in its view


@dataclass(frozen=True)
class ObserverWindows:
    """An observer's (or a coalition's) view cut into windows, the stretches between two values it saw."""

    holders: tuple[tuple[int, ...], ...]  # each window's answers by the node that gave them (−1: no log tells)
    uniform: tuple[int, ...]  # each window's initial elements the observers did not draw
    counts: np.ndarray  # [window, node]: each node's answers in the window
    elements: np.ndarray  # [window]: what hides a source's answers there, with them (the same for every source)
    unseen: np.ndarray  # [node]: its answers after the observers' last value, never in their view
    observers: frozenset[int]
    knows_own: bool

    def pair_view(self, source: int) -> PairView:
        """The windows holding answers of `source`, and what hides them there."""
        windows = tuple(
            Window(int(self.counts[w, source]), self.uniform[w],
                   tuple(h for h in self.holders[w] if h >= 0 and h != source
                         and (h not in self.observers or not self.knows_own)))
            for w in np.flatnonzero(self.counts[:, source]))
        return PairView(windows, int(self.unseen[source]))

    def reconstructable(self) -> np.ndarray:
        """[node]: every answer of it is seen, each alone in its window (nothing hides it there)."""
        held = self.counts > 0
        alone = np.all(~held | (self.elements[:, None] == self.counts), axis=0)
        return held.any(axis=0) & alone & (self.unseen == 0)


def observer_windows(run: TokenRun, observers: frozenset[int], *, initial: int, knows_own: bool) -> ObserverWindows:
    """The windows of `observers`' joint view (hop 0's holder originated the `initial` uniform elements)."""
    seen = sorted({p for v in observers for p in run.views[v]})
    holders = run.holders()
    origin = run.contributions[0].holder if run.contributions else None
    own = np.zeros(run.n, dtype=bool)
    own[list(observers)] = knows_own
    parts, uniform, counts, elements = [], [], [], []
    for start, end in zip([0, *seen], seen):
        window = holders[start:end]
        count = np.bincount(window[window >= 0], minlength=run.n)
        extra = initial if start == 0 and not (origin in observers and knows_own) else 0
        parts.append(tuple(window.tolist()))
        uniform.append(extra)
        counts.append(count)
        elements.append(int(count.sum() - count[own].sum()) + extra)
    tail = holders[seen[-1] if seen else 0:]
    return ObserverWindows(tuple(parts), tuple(uniform), np.array(counts, dtype=int).reshape(len(parts), run.n),
                           np.array(elements, dtype=int), np.bincount(tail[tail >= 0], minlength=run.n),
                           observers, knows_own)


def window_costs(elements: np.ndarray, categories: int) -> tuple[np.ndarray, np.ndarray]:
    """Per window of e elements: the log of its count vectors C(e + L − 1, L − 1), and the count vectors its
    distribution is built through, one element at a time, L·C(e + L, L) (Σ_{k≤e} C(k + L − 1, L − 1) =
    C(e + L, L)), inf when beyond floating point."""
    e = np.asarray(elements, dtype=float)
    log_states = gammaln(e + categories) - gammaln(categories) - gammaln(e + 1)
    with np.errstate(over="ignore"):
        building = categories * np.exp(gammaln(e + categories + 1) - gammaln(categories + 1) - gammaln(e + 1))
    return log_states, building


def enumeration_sizes(windows: ObserverWindows, categories: int) -> np.ndarray:
    """[source]: the count vectors its enumeration visits for one assignment: each of its windows built, and
    their joint outcomes (the product of their count vectors)."""
    log_states, building = window_costs(windows.elements, categories)
    held = windows.counts > 0
    built = np.where(held, building[:, None], 0.0).sum(axis=0)  # a window the source is not in costs nothing
    with np.errstate(over="ignore"):
        return np.rint(built + np.exp(held.T.astype(float) @ log_states))


def _answer(label: int, gamma: float, categories: int) -> np.ndarray:
    """RR_γ's answer distribution for input `label`."""
    probabilities = np.full(categories, gamma / categories)
    probabilities[label] += 1.0 - gamma
    return probabilities


def _convolve(distribution: dict[tuple[int, ...], float], element: np.ndarray) -> dict[tuple[int, ...], float]:
    """The count-vector distribution with one more independent element of law `element`."""
    out: dict[tuple[int, ...], float] = defaultdict(float)
    support = [(k, float(p)) for k, p in enumerate(element) if p > 0.0]
    for state, mass in distribution.items():
        for k, p in support:
            grown = list(state)
            grown[k] += 1
            out[tuple(grown)] += mass * p
    return out


@lru_cache(maxsize=4096)
def window_atoms(sources: int, uniform: int, hiding: tuple[int, ...], gamma: float, categories: int) -> Atoms:
    """The privacy-loss atoms of one window: u answering from input 0 (P) against input 1 (Q)."""
    common: dict[tuple[int, ...], float] = {(0,) * categories: 1.0}
    for label in hiding:
        common = _convolve(common, _answer(label, gamma, categories))
    for _ in range(uniform):
        common = _convolve(common, np.full(categories, 1.0 / categories))
    p, q = common, common
    for _ in range(sources):
        p, q = _convolve(p, _answer(0, gamma, categories)), _convolve(q, _answer(1, gamma, categories))
    atoms: dict[float, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for state in set(p) | set(q):
        mass_p, mass_q = p.get(state, 0.0), q.get(state, 0.0)
        atom = atoms[_log_ratio(mass_p, mass_q)]
        atom[0] += mass_p
        atom[1] += mass_q
    return {key: (mass[0], mass[1]) for key, mass in atoms.items()}


def _log_ratio(p: float, q: float) -> float:
    if q == 0.0:
        return math.inf if p > 0.0 else 0.0
    if p == 0.0:
        return -math.inf
    return round(math.log(p / q), LOG_RATIO_DECIMALS)


def compose(parts: Iterable[Atoms]) -> Atoms:
    """The atoms of independent views together: losses add, masses multiply."""
    total: Atoms = {0.0: (1.0, 1.0)}
    for part in parts:
        merged: dict[float, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for (a, (pa, qa)), (b, (pb, qb)) in itertools.product(total.items(), part.items()):
            key = a + b if not math.isinf(a) and not math.isinf(b) else (a if math.isinf(a) else b)
            atom = merged[round(key, LOG_RATIO_DECIMALS) if not math.isinf(key) else key]
            atom[0] += pa * pb
            atom[1] += qa * qb
        total = {key: (mass[0], mass[1]) for key, mass in merged.items()}
    return total


def hockey_stick(atoms: Atoms, epsilon: float) -> float:
    """δ(ε) = Σ max(0, P − e^ε Q) over the atoms."""
    _, p, q = _arrays(atoms)
    return float(np.maximum(0.0, p - math.exp(epsilon) * q).sum())


def epsilon_at(atoms: Atoms, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ δ, solved exactly on the segment between two atoms' losses.

    With the finite losses k_0 > k_1 > … and the P mass of infinite ones P_∞, δ(ε) = P_j − e^ε Q_j
    on [k_{j+1}, k_j], P_j and Q_j the masses of the atoms 0..j (plus P_∞).
    """
    keys, p, q = _arrays(atoms)
    infinite = float(p[np.isposinf(keys)].sum())
    if infinite > delta:
        return math.inf
    finite = np.isfinite(keys)
    order = np.argsort(-keys[finite])
    keys, p, q = keys[finite][order], p[finite][order], q[finite][order]
    cum_p, cum_q = infinite + np.cumsum(p), np.cumsum(q)
    at_keys = np.concatenate(([infinite], cum_p[:-1] - np.exp(keys[1:]) * cum_q[:-1]))  # δ(k_j)
    above = np.nonzero(at_keys > delta)[0]
    if above.size == 0:
        return 0.0
    j = int(above[0])  # δ(k_j) > δ ≥ δ(k_{j−1}): the answer is in [k_j, k_{j−1}], atoms 0..j−1 above it
    epsilon = math.log((cum_p[j - 1] - delta) / cum_q[j - 1])
    return max(0.0, min(float(keys[j - 1]), max(float(keys[j]), epsilon)))


def _arrays(atoms: Atoms) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys = np.fromiter(atoms, float, len(atoms))
    masses = np.array(list(atoms.values()), dtype=float).reshape(len(atoms), 2)
    return keys, masses[:, 0], masses[:, 1]


def renyi(atoms: Atoms, alpha: float) -> float:
    """D_α(P‖Q) = ln(Σ P^α Q^{1−α}) / (α − 1)."""
    _, p, q = _arrays(atoms)
    if np.any((q == 0.0) & (p > 0.0)):
        return math.inf
    kept = p > 0.0
    total = float(np.sum(p[kept] * (p[kept] / q[kept]) ** (alpha - 1.0)))
    return max(0.0, math.log(total) / (alpha - 1.0))


def ldp_atoms(answers: int, gamma: float, categories: int) -> Atoms:
    """All `answers` answers of one node seen directly: RR_γ from 0 against from 1, composed."""
    single = window_atoms(1, 0, (), gamma, categories)
    return compose([single] * answers)


def _classes(view: PairView) -> dict[tuple[int, ...], int]:
    """The hiding nodes by the windows they answer in and how often (nodes in the same windows are
    exchangeable), with how many share each signature."""
    classes: dict[tuple[int, ...], int] = defaultdict(int)
    for h in sorted({h for w in view.windows for h in w.hiding}):
        classes[tuple(w.hiding.count(h) for w in view.windows)] += 1
    return classes


def _labels(view: PairView, categories: int) -> int:
    """The input categories worth trying: u's two (0 and 1) and one more per hiding node, at most L."""
    return min(categories, 2 + len({h for w in view.windows for h in w.hiding}))


def assignment_count(view: PairView, categories: int) -> int:
    """How many assignments `assignments` yields: a multiset of labels per class of exchangeable nodes."""
    labels = _labels(view, categories)
    return math.prod(math.comb(size + labels - 1, labels - 1) for size in _classes(view).values())


def assignments(view: PairView, categories: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every assignment of input categories to the hiding nodes, as each window's hiding labels."""
    classes, labels = _classes(view), _labels(view, categories)
    choices = [list(itertools.combinations_with_replacement(range(labels), size)) for size in classes.values()]

    def windows_of(picked: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(sorted(label for sig, multiset in zip(classes, picked) for label in multiset
                                  for _ in range(sig[i]))) for i in range(len(view.windows)))

    return (windows_of(picked) for picked in itertools.product(*choices))


def pair_loss(view: PairView, *, gamma: float, categories: int, alpha: float, delta: float) -> tuple[float, float]:
    """(RDP at α, ε at δ) of one pair, the worst over the hiding nodes' inputs (its size checked beforehand)."""
    if not view.windows:
        return 0.0, 0.0
    worst_rdp, worst_eps = 0.0, 0.0
    for labels in assignments(view, categories):
        atoms = compose(window_atoms(w.sources, w.uniform, hidden, gamma, categories)
                        for w, hidden in zip(view.windows, labels))
        worst_rdp = max(worst_rdp, renyi(atoms, alpha))
        worst_eps = max(worst_eps, epsilon_at(atoms, delta))
    return worst_rdp, worst_eps


def account_histogram(run: TokenRun, **options: Unpack[AccountingOptions] | Any) -> PairwiseLosses:
    """Every column of every pair of a ring-histogram run; `sigma` is the γ to account at (capped at 1)."""
    params, n = run.topology.protocol, run.n
    gamma = min(1.0, float(options["sigma"]))
    alpha, delta = options["alpha"], options["delta"]
    threat = options.get("threat_model", ThreatModel())
    initial = initial_elements(params.gamma, n)  # what the run started with, whatever γ is accounted
    exact_rdp, exact_eps, sizes = np.full((n, n), np.nan), np.full((n, n), np.nan), np.full((n, n), np.nan)
    reconstructable = np.zeros((n, n), dtype=bool)
    for v in range(n):
        observers = frozenset(threat.collusion) | {v} if v in threat.collusion else frozenset({v})
        windows = observer_windows(run, observers, initial=initial, knows_own=threat.observer_knows_own_noise)
        reconstructable[:, v] = windows.reconstructable()
        reconstructable[list(observers), v] = False
        sizes[:, v] = enumeration_sizes(windows, params.categories)
        for u in np.flatnonzero(sizes[:, v] <= ENUMERATION_LIMIT):
            if u in observers:
                continue
            view = windows.pair_view(int(u))
            sizes[u, v] *= assignment_count(view, params.categories)
            if sizes[u, v] <= ENUMERATION_LIMIT:
                exact_rdp[u, v], exact_eps[u, v] = pair_loss(view, gamma=gamma, categories=params.categories,
                                                             alpha=alpha, delta=delta)
        sizes[list(observers), v] = np.nan
    answers = run.visits()
    ldp = [ldp_atoms(int(k), gamma, params.categories) for k in answers]
    ldp_rdp = np.array([renyi(atoms, alpha) for atoms in ldp])
    ldp_eps = np.array([epsilon_at(atoms, delta) for atoms in ldp])
    bound = paper_bound(run, sigma=gamma, sensitivity=1.0, delta=delta, threat_model=threat)
    column = bound.column(n)
    notes = describe(bound, [*NOTES, f"RR_gamma at gamma = {gamma:g}: eps = "
                                     f"{rr_epsilon(gamma, params.categories):.6g} per answer"])
    losses = PairwiseLosses(
        alpha=alpha, delta=delta, sigma=gamma, sensitivity=1.0, threat_model=threat,
        paper_rdp=column.rdp, paper_eps=column.eps,
        exact_rdp_lower=exact_rdp, exact_eps_lower=exact_eps,
        exact_rdp_upper=exact_rdp.copy(), exact_eps_upper=exact_eps.copy(),
        reconstructable=reconstructable, ill_conditioned=np.zeros((n, n), dtype=bool), exact_method="enumeration",
        ldp_rdp=float(ldp_rdp.max()), ldp_eps=float(ldp_eps.max()), central_rdp=math.nan, central_eps=math.nan,
        ldp_source_rdp=ldp_rdp, ldp_source_eps=ldp_eps, notes=notes, facts={SIZE_FACT: sizes},
    )
    refused = not_computed(losses)
    if refused.count:
        losses.notes.append(not_computed_note(refused))
    return losses


@dataclass(frozen=True)
class NotComputed:
    """The pairs whose exact enumeration was refused up front: how many, and the smallest estimated sizes."""

    count: int
    of: int  # pairs in the run
    pairs: tuple[tuple[int, int], ...]  # the SHOWN_REFUSALS of smallest estimated size, smallest first
    sizes: tuple[float, ...]

    def to_json(self) -> dict[str, object]:
        return {"count": self.count, "of": self.of, "limit": ENUMERATION_LIMIT,
                "smallest_size": json_number(self.sizes[0]) if self.sizes else None,
                "pairs": [{"source": u, "observer": v, "size": json_number(size)}
                          for (u, v), size in zip(self.pairs, self.sizes)]}


def not_computed(losses: PairwiseLosses) -> NotComputed:
    """The pairs whose exact loss the enumeration refused (NaN), smallest estimated size first."""
    sizes = losses.facts[SIZE_FACT]
    missing = np.isnan(losses.exact_eps) & ~np.isnan(sizes)
    pairs = np.argwhere(missing)
    refused = sizes[missing]
    order = np.argsort(refused, kind="stable")[:SHOWN_REFUSALS]
    return NotComputed(len(pairs), losses.n * (losses.n - 1), tuple((int(u), int(v)) for u, v in pairs[order]),
                       tuple(float(x) for x in refused[order]))


def not_computed_note(refused: NotComputed) -> str:
    """Why some exact values are null: the estimate, the limit, where the sizes are."""
    (u, v), smallest = refused.pairs[0], refused.sizes[0]
    return (f"exact not computed for {refused.count} of {refused.of} pairs (smallest: {u}->{v}, about "
            f"{smallest:.3g} count vectors to enumerate): each pair's enumeration was estimated before it started "
            f"and refused beyond {ENUMERATION_LIMIT:.3g} count vectors (the pairs file's {SIZE_FACT}); their exact "
            "columns are null, not computed, and ldp still bounds them")
