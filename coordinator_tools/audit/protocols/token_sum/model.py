"""The linear-Gaussian model of a token summation: one row per token value some node saw.

The value with prefix h is Σ_{j<h} (x_{holder(j)} + η_j): its input coefficients count the
contributions of each node among the first h (one input per node, contributed at each of its
visits but the noise-only ones past a contribution cap), and it holds every noise draw η_j of those hops, each its own column, owned by the
node that drew it and scaled by its public std over σ (σ/√n for distributed placement), so
one σ serves the whole model. Which hops drew noise is public; which path the walk took is
what the rows are conditioned on (the realized path).
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.protocols.token_sum.run import TokenRun


def linear_model(run: TokenRun) -> LinearGaussianModel:
    """Rows: the distinct prefixes in any view, ascending; columns: the n inputs and the noisy hops' draws."""
    prefixes = sorted({p for view in run.views for p in view})
    position = {p: i for i, p in enumerate(prefixes)}
    known = [j for j, c in enumerate(run.contributions) if c.holder is not None]
    noisy = [j for j in known if run.contributions[j].scale is not None]
    hops = np.arange(run.total)
    before = hops[None, :] < np.asarray(prefixes)[:, None]  # (rows, hops): hop j is in prefix p
    bearing = [j for j in known if run.contributions[j].bears_input]  # noise-only hops add no input
    holders = np.zeros((run.total, run.n))
    holders[bearing, [run.contributions[j].holder for j in bearing]] = 1.0
    return LinearGaussianModel(
        n=run.n,
        inputs=before.astype(float) @ holders,
        received=tuple(tuple(position[p] for p in view) for view in run.views),
        noise=before[:, noisy].astype(float),
        noise_owner=tuple(run.contributions[j].holder for j in noisy),
        noise_scale=np.array([run.contributions[j].scale for j in noisy], dtype=float),
    )
