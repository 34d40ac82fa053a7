"""Account a random-walk DP-SGD run: every column per pair (u → v) on its realized (or simulated) walk.

* paper: ICML 2024 Thm 3 as written, (α/σ_m²)(L[u,v] + H_T/n) per contribution of u (the
  sender-known variant for a sender-known run), times u's realized contributions (capped);
  orders with σ_m² < 2α(α − 1) are outside the theorem and reported as null;
* exact: the linear-Gaussian view of every model v received, conditioned on the walk, with each
  of u's gradient steps moved by Δ in the same direction (the worst case: every coefficient is
  positive) and the other nodes' gradients held fixed — exact for that model, which leaves out
  that in a real run later gradients depend on the hidden noise;
* realized path: amplification by iteration along the walk that ran (`theory.realized_path_rdp`),
  valid whatever the other gradients are, if each step is non-expansive;
* ex ante: the same averaged over simulated walks of the published transition matrix,
  (1/(α−1)) log E exp((α−1)·loss(walk)): what v's view leaks when the walk stays secret;
* ldp: each of u's gradient steps seen directly; central: as for the summations;
* empirical: the one-run canary audit on the exact column's model, as for Muffliato-GD (`canary`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, ClosedForm, account_model, all_pairs
from coordinator_tools.audit.canary import DEFAULT_CANARIES, canary_column, canary_note
from coordinator_tools.audit.conversion import gaussian_rdp, gaussian_rdp_epsilon, rdp_to_epsilon, squared_mu
from coordinator_tools.audit.losses import PairColumn, PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.rw_sgd import theory
from coordinator_tools.audit.protocols.token_sum.model import linear_model
from coordinator_tools.audit.protocols.token_sum.run import TokenRun, simulated_walk, transition_matrix
from node.topology import Topology

DEFAULT_WALKS = 200  # simulated walks behind the ex-ante column
DEFAULT_SEED = 0

NOTES = (
    "paper: ICML 2024 Thm 3 per contribution, (alpha/sigma_m^2)(L[u,v] + H_T/n) with L = -log(I - W + 11^T/n) "
    "and sigma_m = sigma/Delta, times the source's realized gradient steps; sender-known runs take the max of "
    "L[u,w] over the observer and its neighbours w (App. B.1); null where sigma_m^2 < 2 alpha (alpha - 1)",
    "exact: the linear-Gaussian view of every model the observer received, conditioned on the realized walk, the "
    "source's gradient steps all moved by Delta in one direction, the other gradients fixed",
    "realized path: amplification by iteration along the realized walk (a source's steps before the same "
    "observation bounded jointly, observations composed); assumes non-expansive steps",
    f"ex ante: realized path averaged over {DEFAULT_WALKS} simulated walks of the transition matrix (seed "
    f"{DEFAULT_SEED}), (1/(alpha-1)) log E exp((alpha-1) loss), at the report's order only",
)


def paper_factor(topology: Topology, contributions: np.ndarray, *, sigma: float, sensitivity: float,
                 alpha: float) -> np.ndarray:
    """Thm 3's σ-free factor f[u, v] (its RDP is α (Δ/σ)² f / 2), NaN outside the theorem's orders.

    Thm 3 gives the RDP of one contribution, r; `contributions` of them compose to c·r, so
    f = 2 c r (σ/Δ)² / α.
    """
    multiplier = sigma / sensitivity
    if not theory.order_valid(alpha, multiplier):  # σ = 0 included
        return np.full((topology.n, topology.n), np.nan)
    single = theorem3_matrix(topology, alpha, multiplier)
    return np.maximum(single, 0.0) * contributions[:, None] * 2.0 * multiplier**2 / alpha


def paper_column(topology: Topology, contributions: np.ndarray, options: AccountingOptions
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Thm 3 for `contributions` of every source (realized, or expected in a plan): (rdp, eps) [u, v]."""
    sigma, sensitivity, alpha = options["sigma"], options["sensitivity"], options["alpha"]
    factor = paper_factor(topology, contributions, sigma=sigma, sensitivity=sensitivity, alpha=alpha)
    mu = np.sqrt(squared_mu(np.nan_to_num(factor, nan=0.0), sigma=sigma, sensitivity=sensitivity))
    eps = gaussian_rdp_epsilon(mu, options["delta"], alpha=alpha, conversion=options.get("conversion", "tight"))
    invalid = np.isnan(factor)
    return np.where(invalid, np.nan, gaussian_rdp(mu, alpha)), np.where(invalid, np.nan, eps)


def order_notes(options: AccountingOptions) -> list[str]:
    """Why the paper column is null, when it is: the report's order is outside Thm 3."""
    alpha, multiplier = options["alpha"], options["sigma"] / options["sensitivity"]
    if theory.order_valid(alpha, multiplier):
        return []
    return [f"paper: Thm 3 does not hold at order alpha = {alpha:g} with noise multiplier sigma/Delta = "
            f"{multiplier:.4g}: it needs sigma_m^2 >= 2 alpha (alpha - 1) = {2 * alpha * (alpha - 1):.4g}; the column "
            "is null (a smaller order, or more noise, brings it back)"]


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
    model, notes, empirical = linear_model(run), list(NOTES), None
    if attack_pairs is not None:
        pairs = all_pairs(model, options.get("threat_model", ThreatModel())) if attack_pairs == "all" else attack_pairs
        empirical = canary_column(lambda v: model, pairs, options, canaries=canaries, seed=seed)
        notes.append(canary_note(canaries, seed, direction="one direction at every gradient step of the source"))
    losses = account_model(model, ClosedForm(*paper), releases=contributions, notes=notes,
                           empirical_eps_lower=empirical, **options)
    losses.notes.extend(order_notes(options))
    holders, bearing = run.holders(), run.bearing()
    if (holders >= 0).all():
        geometry = 2.0 * theory.realized_path_rdp(holders, bearing, run.n, 1.0, 1.0, 1.0)  # μ² over (Δ/σ)²
        losses.columns["realized_path"] = gaussian_column(geometry, options)
    else:
        losses.notes.append("realized path: not computed, some hop of the walk has no known holder")
    rng = np.random.default_rng(DEFAULT_SEED)
    losses.columns["ex_ante"] = ex_ante_column([simulated_walk(topology, rng) for _ in range(DEFAULT_WALKS)],
                                               options)
    losses.facts["communicability"] = communicability(topology)
    return losses


def communicability(topology: Topology) -> np.ndarray:
    """The graph's Estrada–Hatano communicability expm(A) [u, v], shown beside the losses (ICML 2024 Fig. 3)."""
    adjacency = np.zeros((topology.n, topology.n))
    for v, peers in enumerate(topology.neighbours):
        adjacency[v, list(peers)] = 1.0
    return theory.estrada_communicability(adjacency)


def ex_ante_column(walks: Sequence[TokenRun], options: AccountingOptions) -> PairColumn:
    """The realized-path bound averaged over simulated walks of the published W."""
    topology, sigma = walks[0].topology, options["sigma"]
    paths, cap = [walk.holders() for walk in walks], topology.protocol.contribution_cap
    if sigma == 0.0:  # no noise: infinite wherever some walk carries u's gradient to v
        reached = theory.ex_ante_rdp(paths, cap, topology.n, options["alpha"], 1.0, 1.0) > 0
        rdp = np.where(np.eye(topology.n, dtype=bool), np.nan, np.where(reached, np.inf, 0.0))
    else:
        rdp = theory.ex_ante_rdp(paths, cap, topology.n, options["alpha"], sigma, options["sensitivity"])
    return rdp_column(rdp, options["alpha"], options["delta"])


def gaussian_column(geometry: np.ndarray, options: AccountingOptions) -> PairColumn:
    """A Gaussian-shaped bound, RDP α μ²/2 at every order with μ² = (Δ/σ)² · geometry, at the report's α and δ."""
    mu = np.sqrt(squared_mu(np.nan_to_num(geometry, nan=0.0), sigma=options["sigma"],
                            sensitivity=options["sensitivity"]))
    eps = gaussian_rdp_epsilon(mu, options["delta"], alpha=options["alpha"],
                               conversion=options.get("conversion", "tight"))
    unknown = np.isnan(geometry)
    return PairColumn(rdp=np.where(unknown, np.nan, gaussian_rdp(mu, options["alpha"])),
                      eps=np.where(unknown, np.nan, eps))


def rdp_column(rdp: np.ndarray, alpha: float, delta: float) -> PairColumn:
    """A column known at the report's order only: ε at δ by the tight conversion at that one order."""
    eps = rdp_to_epsilon([alpha], np.nan_to_num(rdp, nan=0.0)[..., None], delta)
    return PairColumn(rdp=rdp, eps=np.where(np.isnan(rdp), np.nan, eps))
