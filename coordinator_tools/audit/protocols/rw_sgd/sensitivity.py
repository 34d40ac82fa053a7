"""The linearized and the exact column of a random-walk DP-SGD run, given the realized walk.

The walk's model after h hops is θ_0 − γ Σ_{j<h} (g_j + η_j), damped by (1 − γλ) at every later
gradient step with a regulariser λ (`token_sum.model`, `decay`). Holding every gradient g_j fixed,
each of u's gradient steps is its own column (`contribution_columns`) and each draw its own noise
column: the linearized model. Observer v's view (every model it received; its own gradients and,
by default, its own noise known) whitened by the noise gives, per source u, the Gram matrix X_u of
u's T_u step columns, and `step_geometry` is the worst case over the steps' directions in R^D, D the
model's dimension (`directions`: a certified interval of that model, the upper end a proof). It is
no bound on the run: a gradient taken at a model that carries earlier noise can undo it (walk
v, w, u, v with a contracting step of u: the run reveals up to Δ²/σ², the model Δ²/(2σ²)).

Without a regulariser the segments of the walk between v's observations carry independent noise,
so X_u ≥ 0 entrywise and steps in one direction reach the worst case (`theory.segment_exact_rdp`,
its closed form): the interval closes on that value, checked for every pair rather than assumed.

The exact column is the proven bound (`reachable`): `reachable_counts` counts u's gradient steps
before the last model v received, every one of which reaches it along the walk.
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.core import whitened_signal
from coordinator_tools.audit.directions import direction_interval
from coordinator_tools.audit.exact import ViewGeometry, ill_conditioned
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.token_sum.model import contribution_columns, linear_model
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.views import observer_view


def step_geometry(run: TokenRun, threat_model: ThreatModel = ThreatModel()) -> ViewGeometry:
    """The linearized sens²_{u→v}/Δ² of every pair [u, v] (NaN where u observes) over the directions of u's gradient
    steps."""
    params = run.topology.protocol
    decay = 1.0 - params.learning_rate * params.regularization
    model = linear_model(run, decay)
    steps, holders = contribution_columns(run, decay)
    dimension = run.topology.protocol.dimension
    n = run.n
    lower, upper = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for v in range(n):
        view = observer_view(model, v, threat_model)
        rows = list(view.messages)
        noise = (model.noise_rows[rows] * model.scales)[:, view.unknown_draws(model)]
        sources = view.sources()
        ends = [_source_blocks(whitened, outside, holders, sources)
                for whitened, outside in whitened_signal(steps[rows], noise)]
        (standard, pinned_standard), (fine, pinned_fine) = ends
        interval = direction_interval(standard, fine, dimension)
        low = np.where(pinned_standard, np.inf, interval.lower)
        high = np.where(pinned_fine, np.inf, interval.upper)
        lower[sources, v], upper[sources, v] = np.minimum(low, high), np.maximum(low, high)
    none = np.zeros((n, n), dtype=bool)
    return ViewGeometry(lower, upper, none, ill_conditioned(lower, upper), "float-interval (general)")


def reachable_counts(run: TokenRun, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """c [u, v]: how many of u's gradient steps precede some model v (or v's coalition) received; NaN where u
    observes. The walk carries every step to every later model, so these are the steps that reach v's view."""
    model = linear_model(run)
    steps, holders = contribution_columns(run)
    n = run.n
    counts = np.full((n, n), np.nan)
    for v in range(n):
        view = observer_view(model, v, threat_model)
        reached = steps[list(view.messages)].any(axis=0)
        sources = view.sources()
        counts[sources, v] = np.bincount(holders[reached], minlength=n)[sources]
    return counts


def _source_blocks(whitened: np.ndarray, outside: np.ndarray, holders: np.ndarray,
                   sources: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(X_u of every source, zero-padded to the most steps any source made; whether the view pins a step of u down
    without noise, an infinite loss)."""
    columns = [np.flatnonzero(holders == u) for u in sources]
    width = max((len(c) for c in columns), default=0)
    blocks = np.zeros((len(sources), width, width))
    for i, own in enumerate(columns):
        part = whitened[:, own]
        blocks[i, :len(own), :len(own)] = part.T @ part
    return blocks, np.array([bool(outside[own].any()) for own in columns], dtype=bool)
