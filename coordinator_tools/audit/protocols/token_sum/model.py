"""The linear-Gaussian model of a token summation: one row per token value some node saw.

The value with prefix h is Σ_{j<h} (x_{holder(j)} + η_j): its input coefficients count the
contributions of each node among the first h (one input per node, contributed at each of its
visits but the noise-only ones past a contribution cap), and it holds every noise draw η_j of
those hops, each its own column, owned by the node that drew it and scaled by its public std
over σ (σ/√n for distributed placement), so
one σ serves the whole model. Which hops drew noise is public; which path the walk took is
what the rows are conditioned on (the realized path).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.protocols.token_sum.rebuild import value_prefix
from coordinator_tools.audit.protocols.token_sum.records import TokenRules, rules_for
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.records import MessageKey


def linear_model(run: TokenRun, decay: float = 1.0) -> LinearGaussianModel:
    """Rows: the distinct prefixes in any view, ascending; columns: the n inputs and the noisy hops' draws. `decay`
    is a walking model's damping (1 − γλ) at every gradient step (`_before`): 1 for a sum."""
    prefixes = _prefixes(run)
    position = {p: i for i, p in enumerate(prefixes)}
    known = [j for j, c in enumerate(run.contributions) if c.holder is not None]
    noisy = [j for j in known if run.contributions[j].scale is not None]
    hops, holders = contribution_columns(run, decay)
    return LinearGaussianModel(
        n=run.n,
        inputs=hops @ (holders[:, None] == np.arange(run.n)).astype(float),
        received=tuple(tuple(position[p] for p in view) for view in run.views),
        noise=_before(prefixes, run.total, decay, run.bearing())[:, noisy],
        noise_owner=tuple(run.contributions[j].holder for j in noisy),
        noise_scale=np.array([run.contributions[j].scale for j in noisy], dtype=float),
    )


def contribution_columns(run: TokenRun, decay: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(rows × contributions, holders): each input-bearing hop's coefficient in every row of `linear_model`, and
    the node that made it. A node's input column is the sum of its contributions' columns: one change moved
    the same way at every visit; a learning walk's gradient steps may each move their own way."""
    bearing = [j for j, c in enumerate(run.contributions) if c.holder is not None and c.bears_input]
    holders = np.array([run.contributions[j].holder for j in bearing], dtype=int)
    return _before(_prefixes(run), run.total, decay, run.bearing())[:, bearing], holders


def _prefixes(run: TokenRun) -> list[int]:
    """The distinct prefixes in any view, ascending: the model's rows."""
    return sorted({p for view in run.views for p in view})


def _before(prefixes: list[int], total: int, decay: float = 1.0, damped: np.ndarray | None = None) -> np.ndarray:
    """(rows, hops): hop j's weight in prefix p, 0 unless j < p; else 1 times `decay` for every `damped` hop i with
    j < i < p (θ_{i+1} = (1 − γλ) θ_i − γ(g_i + η_i) at a gradient step i: later steps damp what hop j added)."""
    hops, ends = np.arange(total)[None, :], np.asarray(prefixes, dtype=int)[:, None]
    inside = hops < ends
    if decay == 1.0:
        return inside.astype(float)
    count = np.concatenate(([0], np.cumsum(damped)))  # damped hops before each prefix
    exponent = np.maximum(count[ends] - count[np.minimum(hops + 1, total)], 0)
    return np.where(inside, float(decay) ** exponent, 0.0)


def canary_model(run: TokenRun) -> CanaryModel:
    """The run's canary coordinates: every contribution carries its holder's canaries, so the rows' input
    coefficients; a value is named by its prefix, and its payload is the token (−γ times it for a walking model)."""
    model = linear_model(run)
    return CanaryModel(model, model.inputs, tuple(_prefixes(run)),
                       partial(token_value, rules_for(run.topology), run.total), scale=run.value_scale())


def token_value(rules: TokenRules, total: int, key: MessageKey) -> int | None:
    """The prefix of a logged token value (`rebuild.value_prefix`); None for a message that is no token value."""
    if rules.spec_of_kind(key.kind) is None and key.kind != rules.result_message:
        return None
    return value_prefix(key, rules, total)
