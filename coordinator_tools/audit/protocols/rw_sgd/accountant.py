"""Account a random-walk DP-SGD run: every column per pair (u → v) on its realized (or simulated) walk.

* paper: ICML 2024 Thm 3 as written, (α/σ_m²)(L[u,v] + H_T/n) per contribution of u (the
  sender-known variant for a sender-known run), times u's realized contributions (capped), a bound
  ex ante over the walk. The theorem holds only at the orders with σ_m² ≥ 2α(α − 1): its RDP is
  null at a report order outside them, and its ε is the tight conversion over those orders only
  (`theorem3_orders`), null ("not computed", with a note) where no order holds;
* exact: conditioned on the walk (which v is not told), the proven bound (`reachable`): u's gradient
  steps before the last model v received, composed (`sensitivity.reachable_counts`);
* linearized: the linear-Gaussian view of every model v received, given the walk, each of u's
  gradient steps moved by at most Δ in its own direction, the worst case over those directions
  (`sensitivity.step_geometry`), and the other gradients held fixed: exact for that model, no bound
  on the run, whose later gradients depend on the hidden noise;
* realized path: amplification by iteration along the walk that ran (`theory.realized_path_rdp`),
  valid whatever the other gradients are, if each step is non-expansive; conditioned on it too;
* ex ante: the same averaged over simulated walks of the published transition matrix,
  (1/(α−1)) log E exp((α−1)·loss(walk)): what v's view leaks when the walk stays secret, an estimate
  with the upper end of its interval (`ex_ante`);
* ldp: each of u's gradient steps seen directly; central: as for the summations;
* model attack: canaries simulated on the linear model of the canary coordinates (`canary`).
"""

from __future__ import annotations

import dataclasses
from typing import Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, ClosedForm, account_model, all_pairs
from coordinator_tools.audit.canary import DEFAULT_CANARIES, canary_column, canary_note
from coordinator_tools.audit.conversion import (
    MIN_TIGHT_ORDER,
    ORDERS,
    classic_epsilon,
    gaussian_rdp,
    gaussian_rdp_epsilon,
    rdp_to_epsilon,
    squared_mu,
)
from coordinator_tools.audit.losses import PairColumn, PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.rw_sgd import ex_ante, theory
from coordinator_tools.audit.protocols.rw_sgd.sensitivity import reachable_counts, step_geometry
from coordinator_tools.audit.protocols.token_sum.model import linear_model
from coordinator_tools.audit.protocols.token_sum.run import TokenRun, planned_contributions, transition_matrix
from coordinator_tools.audit.reachable import linearized_column, reachable_geometry, state_assumptions
from node.protocols.rw_sgd import START
from node.topology import Topology

DEFAULT_WALKS = 200  # simulated walks behind a plan's exact column (the mixture)
DEFAULT_SEED = 0
# Orders of a geometric grid up to Thm 3's largest valid order, converted beside the conversion's own grid.
VALID_ORDER_GRID = 64
EXACT_GIVEN = "the realized path"
DEFINITIONS = {
    "paper": "ICML 2024 Thm 3, ex ante over the walk: (alpha/sigma_m^2)(L[u,v] + H_T/n) per gradient step of u, "
             "sigma_m = sigma/Delta, times u's realized steps; rdp null where the report's alpha is outside the "
             "theorem (sigma_m^2 < 2 alpha (alpha - 1)), eps by the tight conversion over the orders where it holds",
    "linearized": "given the realized path (the observer is not told it): the linear-Gaussian view of every model "
                  "the observer received with every gradient a fixed input, u's steps each moved by at most Delta, "
                  "the worst case over their directions in R^D (a certified interval of that model: rdp/eps "
                  "reached, rdp_upper/eps_upper proven), the regulariser's damping (1 - gamma lambda) in the rows",
    "realized_path": "given the realized path (the observer is not told it): amplification by iteration along it "
                     "(ICML 2024 Thm 1, Feldman et al. 2018), proven if every step is non-expansive (e.g. a convex "
                     "smooth loss with gamma <= 2/L), which the audit does not check",
    "ex_ante": "the path kept secret: realized_path averaged over simulated walks of W, (1/(alpha-1)) log E "
               "exp((alpha-1) loss), at the report's alpha; an estimate: lead with rdp_upper / eps_upper, the upper "
               "end of each pair's 95% interval",
    "ldp": "each of u's gradient steps seen directly",
}
NOTES = (
    "paper: L = -log(I - W + 11^T/n); sender-known runs take the max of L[u,w] over the observer and its "
    "neighbours w (App. B.1)",
    "realized path: a source's steps before the same observation bounded jointly, observations composed",
)


def paper_factor(topology: Topology, contributions: np.ndarray) -> np.ndarray:
    """Thm 3's σ-free factor f[u, v] for `contributions` of every source: its RDP is α (Δ/σ)² f / 2 at every order
    where the theorem holds (one contribution's is (α/σ_m²)(L + H_T/n), linear in α; c of them compose to c times
    it, so f = 2c(L + H_T/n), the negative ones, which bound nothing, at 0)."""
    single = theory.theorem3_factor(transition_matrix(topology), topology.protocol.steps,
                                    topology.protocol.sender == "known")
    return 2.0 * np.maximum(single, 0.0) * contributions[:, None]


def theorem3_orders(multiplier: float) -> np.ndarray:
    """The orders to convert Thm 3 at: the conversion's grid and a geometric one up to the largest order where the
    theorem holds (that order included), kept where it holds and the tight conversion is used (> MIN_TIGHT_ORDER);
    empty when there is none."""
    top = theory.largest_valid_order(multiplier)
    if top <= MIN_TIGHT_ORDER:
        return np.zeros(0)
    orders = np.union1d(ORDERS[ORDERS <= top], np.geomspace(MIN_TIGHT_ORDER, top, VALID_ORDER_GRID))
    return orders[(orders > MIN_TIGHT_ORDER) & theory.order_valid(orders, multiplier)]


def paper_column(topology: Topology, contributions: np.ndarray, options: AccountingOptions
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Thm 3 for `contributions` of every source (realized, or expected in a plan): (rdp, eps) [u, v], each null
    where the theorem gives none (see the module)."""
    sigma, sensitivity, alpha, delta = options["sigma"], options["sensitivity"], options["alpha"], options["delta"]
    multiplier = sigma / sensitivity
    mu = np.sqrt(squared_mu(paper_factor(topology, contributions), sigma=sigma, sensitivity=sensitivity))
    nothing = np.full(mu.shape, np.nan)
    rdp = gaussian_rdp(mu, alpha) if theory.order_valid(alpha, multiplier) else nothing
    if options.get("conversion", "tight") == "paper":  # the classic conversion at the report's order only
        return rdp, classic_epsilon(rdp, alpha, delta)
    orders = theorem3_orders(multiplier)
    if not orders.size:
        return rdp, nothing
    return rdp, gaussian_rdp_epsilon(mu, delta, alpha=alpha, conversion="tight", orders=orders)


def order_notes(options: AccountingOptions) -> list[str]:
    """Why the paper column is null where it is: the report's order, or every order, outside Thm 3."""
    alpha, multiplier = options["alpha"], options["sigma"] / options["sensitivity"]
    top = theory.largest_valid_order(multiplier)
    notes = []
    if not theory.order_valid(alpha, multiplier):
        notes.append(f"paper: Thm 3 does not hold at order alpha = {alpha:g} with noise multiplier sigma/Delta = "
                     f"{multiplier:.4g}: it needs sigma_m^2 >= 2 alpha (alpha - 1) = {2 * alpha * (alpha - 1):.4g}; "
                     "paper rdp is null (a smaller order, or more noise, brings it back)")
    if options.get("conversion", "tight") == "tight" and theorem3_orders(multiplier).size == 0:
        notes.append(f"paper: eps not computed: Thm 3 holds at no order above {MIN_TIGHT_ORDER:g} with noise "
                     f"multiplier {multiplier:.4g} (the largest is {top:.6g}), so it certifies no eps")
    elif options.get("conversion", "tight") == "tight":
        notes.append(f"paper: eps by the tight conversion over the orders where Thm 3 holds, up to alpha = {top:.6g}")
    return notes


def theorem3_matrix(topology: Topology, alpha: float, multiplier: float) -> np.ndarray:
    """Thm 3 per single contribution at order α (the run's view: sender-known or anonymous)."""
    params = topology.protocol
    return theory.theorem3_single(transition_matrix(topology), params.steps, alpha, multiplier,
                                  sender_known=params.sender == "known")


def account(run: TokenRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the realized walk `run` at the options' noise, Δ, order and δ."""
    topology = run.topology
    contributions = run.visits()
    paper = paper_column(topology, contributions.astype(float), options)
    attack_pairs, seed = options.pop("attack_pairs", None), options.pop("rng_seed", None)
    canaries = options.pop("attack_runs", DEFAULT_CANARIES)
    model, notes, model_attack = linear_model(run), list(NOTES), None
    threat_model = options.get("threat_model", ThreatModel())
    if attack_pairs is not None:
        pairs = all_pairs(model, threat_model) if attack_pairs == "all" else attack_pairs
        model_attack = canary_column(lambda v: model, pairs, options, canaries=canaries, seed=seed)
        notes.append(canary_note(canaries, seed, direction="one direction at every gradient step of the source"))
    losses = account_model(model, ClosedForm(*paper), geometry=reachable_geometry(reachable_counts(run, threat_model)),
                           releases=contributions, notes=notes, model_attack_eps_lower=model_attack, **options)
    losses.notes.extend(order_notes(options))
    holders, bearing = run.holders(), run.bearing()
    if (holders >= 0).all():
        geometry = theory.path_geometry(holders[None], bearing[None], run.n)[0]
        np.fill_diagonal(geometry, np.nan)
        losses.columns["realized_path"] = gaussian_column(geometry, options)
    else:
        losses.notes.append("realized path: not computed, some hop of the walk has no known holder")
    losses.columns["ex_ante"] = ex_ante_column(topology, options)
    losses.exact_given = EXACT_GIVEN
    linearized = step_geometry(run, threat_model)
    state_assumptions(losses, linearized_column(linearized.lower, linearized.upper, options),
                      definitions(losses.columns["ex_ante"]))
    losses.facts["communicability"] = communicability(topology)
    return losses


def definitions(ex_ante_column: PairColumn) -> dict[str, str]:
    """Every column's line for the page, the ex-ante one with how many walks it took and how narrow it came out."""
    sampling = ex_ante_column.sampling
    width = sampling["relative_half_width"]["median"]
    drawn = f"; {sampling['walks']} walks (seed {sampling['seed']})"
    if width is not None:
        drawn += f", median relative half-width {width:.2%}"
    return {**DEFINITIONS, "ex_ante": DEFINITIONS["ex_ante"] + drawn}


def communicability(topology: Topology) -> np.ndarray:
    """The graph's Estrada–Hatano communicability expm(A) [u, v], shown beside the losses (ICML 2024 Fig. 3)."""
    adjacency = np.zeros((topology.n, topology.n))
    for v, peers in enumerate(topology.neighbours):
        adjacency[v, list(peers)] = 1.0
    return theory.estrada_communicability(adjacency)


def ex_ante_column(topology: Topology, options: AccountingOptions, *, seed: int = DEFAULT_SEED,
                   walks: int | None = None) -> PairColumn:
    """The realized-path bound averaged over walks of the published W from the start node (`ex_ante.simulate`,
    from `seed`: until its intervals are narrow, or `walks` of them), with the upper end of its interval; ε of both
    at δ by the tight conversion at the report's order."""
    sigma, sensitivity, alpha = options["sigma"], options["sensitivity"], options["alpha"]
    estimate = ex_ante.simulate(transition_matrix(topology), planned_contributions(topology), START,
                                topology.protocol.contribution_cap, alpha=alpha, sigma=sigma or sensitivity,
                                sensitivity=sensitivity, seed=seed, walks=walks)
    if sigma == 0.0:  # no noise: infinite wherever some walk carries u's gradient to v, no interval around it
        reached = np.where(estimate.rdp > 0, np.inf, estimate.rdp)
        estimate = dataclasses.replace(estimate, rdp=reached, rdp_upper=reached)
    delta = options["delta"]
    return PairColumn(rdp=estimate.rdp, eps=_one_order_epsilon(estimate.rdp, alpha, delta),
                      rdp_upper=estimate.rdp_upper, eps_upper=_one_order_epsilon(estimate.rdp_upper, alpha, delta),
                      sampling=estimate.to_json())


def gaussian_column(geometry: np.ndarray, options: AccountingOptions) -> PairColumn:
    """A Gaussian-shaped bound, RDP α μ²/2 at every order with μ² = (Δ/σ)² · geometry, at the report's α and δ."""
    mu = np.sqrt(squared_mu(np.nan_to_num(geometry, nan=0.0), sigma=options["sigma"],
                            sensitivity=options["sensitivity"]))
    eps = gaussian_rdp_epsilon(mu, options["delta"], alpha=options["alpha"],
                               conversion=options.get("conversion", "tight"))
    unknown = np.isnan(geometry)
    return PairColumn(rdp=np.where(unknown, np.nan, gaussian_rdp(mu, options["alpha"])),
                      eps=np.where(unknown, np.nan, eps))


def _one_order_epsilon(rdp: np.ndarray, alpha: float, delta: float) -> np.ndarray:
    """ε at δ of a loss known at the report's order only: the tight conversion at that one order."""
    eps = rdp_to_epsilon([alpha], np.nan_to_num(rdp, nan=0.0, posinf=np.inf)[..., None], delta)
    return np.where(np.isnan(rdp), np.nan, eps)
