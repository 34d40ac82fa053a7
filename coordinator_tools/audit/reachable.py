"""The exact column of a learning run: a proven bound, adaptive composition over the source's steps that reach the view.

A learning run (Muffliato-GD, random-walk DP-SGD) takes every gradient at a model that carries
earlier noise, and u's data, through messages the observer never sees. The matrix-factorization
value of the view with every other node's gradient held fixed (`linearized`: `muffliato_gd.sensitivity`,
`rw_sgd.sensitivity`) is exact for that model only, and for a partial view it is neither an upper nor a
lower bound: on the path v – u – w with quadratic losses and step 1/L (T = 2, one round per step) v's
view reveals 2Δ²/σ² of u and the linearized value is 1.9Δ²/σ², while w learns nothing of v two hops
away, where it gives 0.1Δ²/σ²; a walk v, w, u, v reveals Δ²/σ² of u, where it gives Δ²/(2σ²). So the
exact column of a learning run is the theorem below, and the linearized value a column of its own,
named for what it is.

**Theorem** (reachable-step composition). Under CONDITIONS, let c_{u,v} be the number of u's
gradient steps (Muffliato-GD) or contributions (rw-sgd) with a time-respecting path in the realized
schedule to some value v received. Then v's view is (√c_{u,v} Δ/σ)-GDP: its RDP is c α Δ²/(2σ²) at
every order and its ε at δ the exact Gaussian profile at μ = √c Δ/σ.

*Proof.* Let A be every model state in the causal past of v's received values, in time order. A
gossip state of A is a fixed function of earlier states of A (A is causally closed); a step state
θ_w − η(g_w(θ_w) + z_w) has θ_w in A, so given the earlier states it is Gaussian with covariance
η²σ² (A2) and a mean that differs between adjacent datasets only if w = u, by at most ηΔ (A1), the
schedule being the same under both (A3). Adaptive composition (Mironov 2017, Prop. 1; Dong, Roth
& Su 2022, Cor. 3.3) over the c such states of u bounds A, and v's view is a post-processing of A
with v's own data and noise, which do not depend on u's (A4). ∎

It holds for any losses, convex or not; for a neighbour that hears u at every step it is tight
(the quadratic example above reaches it). No value the view provably reaches is known, so the
interval's lower end is NaN ("not computed": `exact_is_bound`, which every check reads as no evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.conversion import (
    gaussian_epsilon,
    gaussian_mixture_epsilon,
    gaussian_rdp,
    mixture_rdp,
    squared_mu,
)
from coordinator_tools.audit.exact import ViewGeometry
from coordinator_tools.audit.losses import PairColumn, PairwiseLosses

THEOREM = ("reachable-step composition: with c[u,v] the number of u's gradient steps that reach some value v "
           "received by a time-respecting path of the realized schedule, v's view is (sqrt(c) Delta/sigma)-GDP, "
           "RDP c alpha Delta^2/(2 sigma^2); by adaptive composition (Mironov 2017 Prop. 1; Dong, Roth & Su 2022 "
           "Cor. 3.3) over those steps, each Gaussian given the model states before it, then post-processing")
CONDITIONS = (
    "A1: per-example clipping, so that at any model u's step gradient moves by at most Delta between adjacent "
    "datasets; the regulariser depends on no data",
    "A2: fresh independent N(0, sigma^2) noise at every step",
    "A3: a schedule (graphs, drop-outs, the walk, batches, step sizes) independent of the data",
    "A4: the observer knows its own data and noise; a coalition sees the union of its members' views",
)
LINEARIZED_SENTENCE = ("`linearized` holds every other node's gradient fixed, which a learning run does not; it is "
                       "neither an upper nor a lower bound on what v learns: read `exact`, a proven bound.")
EXACT_DEFINITION = (f"a proven upper bound, {THEOREM}; under {'; '.join(CONDITIONS)}. No certified value the view "
                    "reaches: the lower end is null")
METHOD: Final = "reachable steps"


def reachable_geometry(counts: np.ndarray) -> ViewGeometry:
    """The exact column's σ-free factors from c [u, v] (NaN where u observes): the upper end c, no lower end."""
    upper = np.asarray(counts, dtype=float)
    none = np.zeros(upper.shape, dtype=bool)
    return ViewGeometry(np.full(upper.shape, np.nan), upper, none, none, METHOD)


def linearized_column(lower: np.ndarray, upper: np.ndarray, options: AccountingOptions, *,
                      mixture: bool = False) -> PairColumn:
    """The linearized model's certified interval of σ-free factors as a column: `rdp`/`eps` at the value it reaches,
    `rdp_upper`/`eps_upper` at its proven end (of the model, not of the run), ε by the exact Gaussian profile.
    `mixture`: simulated schedules along axis 0, reported as their mixture, as `plan.mixture_losses` does."""
    alpha, delta = options["alpha"], options["delta"]

    def ends(factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu = np.sqrt(squared_mu(factor, sigma=options["sigma"], sensitivity=options["sensitivity"]))
        if mixture:
            return mixture_rdp(gaussian_rdp(mu, alpha), alpha), gaussian_mixture_epsilon(mu, delta)
        return gaussian_rdp(mu, alpha), gaussian_epsilon(mu, delta)

    (rdp, eps), (rdp_upper, eps_upper) = ends(lower), ends(upper)
    return PairColumn(rdp=rdp, eps=eps, rdp_upper=rdp_upper, eps_upper=eps_upper)


def state_assumptions(losses: PairwiseLosses, linearized: PairColumn, definitions: Mapping[str, str]) -> None:
    """Name what the learning run's columns assume in `losses`: the linearized column beside the exact one, the
    exact column a bound (`exact_is_bound`), the report's `assumptions` block, and one line per column for the
    page (`definitions`: the protocol's other columns, and the linearized model's own definition under
    "linearized", which the line prefixes with LINEARIZED_SENTENCE); set `exact_given` first."""
    definition = definitions["linearized"]
    losses.columns["linearized"] = linearized
    losses.exact_is_bound = True
    losses.assumptions = {"exact": {"theorem": THEOREM, "conditions": list(CONDITIONS)},
                          "linearized": {"definition": definition}}
    given = losses.exact_given
    exact = EXACT_DEFINITION if given is None else f"given {given} (the observer is not told it): {EXACT_DEFINITION}"
    for name, text in definitions.items():  # exact just before linearized, which the sentence sends back to it
        if name == "linearized":
            losses.definitions.update({"exact": exact, "linearized": f"{LINEARIZED_SENTENCE} {definition}"})
        else:
            losses.definitions[name] = text
