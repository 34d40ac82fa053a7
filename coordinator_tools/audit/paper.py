"""Muffliato Theorem 1's sum on explicit message rows (the "paper" column of row-based runs).

f(u, v) = αΔ²/(2σ²) · Σ_{messages m in v's view} (row_m)²_u / ‖row_m‖²,

each message's marginal Gaussian loss added up, with row_m the message's coefficients on the
noisy inputs z = x + η, i.e. the realized product of the mixing matrices that produced it
(Cor. 1 / Thm 4 for randomized gossip). It ignores that messages share noise, so it can fall
below the exact loss; the report flags those pairs. Synchronous Muffliato streams the same
sum round by round (`protocols.muffliato.paper`).
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.views import observer_views


def message_share_sum(model: LinearGaussianModel, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """Σ over v's messages of u's share of each message: array [u, v], NaN where u observes.

    Needs a one-draw-per-input model (the theorem's setting): the rows are on z.
    """
    if not model.shared:
        raise ValueError("Theorem 1's sum needs one noise draw per input, with the input's rows")
    total = np.zeros((model.n, model.n))
    for v, view in enumerate(observer_views(model, threat_model)):
        rows = model.inputs[list(view.messages)]
        share = np.square(rows)
        norms = share.sum(axis=1, keepdims=True)
        np.divide(share, norms, out=share, where=norms > 0)
        total[:, v] = share.sum(axis=0)
        total[list(view.observers), v] = np.nan
    return total
