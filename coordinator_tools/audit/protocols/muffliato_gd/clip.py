"""The clip check: every logged step gradient within the bound the noise is calibrated to.

A node's step gradient is the mean of its step's per-example gradients, each clipped to l2 norm C,
plus the regulariser's λθ at its model θ (`node.learning.clipped_gradient`). λθ depends on no data
and cancels between adjacent datasets, so what the sensitivity rests on is the data part
g − λθ: a mean of vectors of norm at most C has norm at most C, and replacing one of b averaged
examples moves it by at most 2C/b, the whole local set by at most 2C (`derived_sensitivity`), which
the published Δ must cover. The check holds g_v^s − λθ_v^s of every logged gradient to ‖·‖ ≤ C at
the recomputed model θ_v^s (`trajectories`). A log holds the mean, not the examples, so a mean
within C is what it can show of the per-example clip that 2C/b assumes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coordinator_tools.audit.checks import CLIP_CHECK, Check
from coordinator_tools.audit.records import PrivateSection
from coordinator_tools.audit.trajectories import TRAJECTORY_RTOL
from node.protocols.muffliato_gd import MuffliatoGDParams


def clip_check(params: MuffliatoGDParams, private: PrivateSection,
               models: Mapping[tuple[int, int], np.ndarray]) -> Check:
    """‖g_v^s − λθ_v^s‖₂ ≤ C for every node's every logged gradient (relative slack TRAJECTORY_RTOL)."""
    norms: dict[tuple[int, int], float] = {}
    unplaced: list[tuple[int, int]] = []
    data = slice(0, params.dimension)  # the canary coordinates after them (an audit run) are the audit's own
    for node, gradients in sorted(private.inputs.items()):
        for step, gradient in enumerate(gradients):
            model = models.get((node, step))
            if model is None and params.regularization > 0.0:
                unplaced.append((node, step))
            else:
                regularizer = 0.0 if model is None else params.regularization * model[data]
                norms[node, step] = float(np.linalg.norm(gradient[data] - regularizer))
    over = [(where, norm) for where, norm in norms.items() if norm > params.clip * (1.0 + TRAJECTORY_RTOL)]
    largest = max(norms.values(), default=0.0)
    detail = (f"{len(norms)} step gradients of {len({node for node, _ in norms})} nodes, the largest "
              f"{'‖g − λθ‖' if params.regularization else '‖g‖'} {largest:.6g} against clip C = {params.clip:g} "
              f"(sensitivity {params.sensitivity:g} published)")
    if not norms and not unplaced:
        return Check(CLIP_CHECK, False, "no node's private log holds a step gradient")
    if over:
        (node, step), norm = over[0]
        return Check(CLIP_CHECK, False, f"{detail}; {len(over)} above C, first: node {node}'s step {step} at "
                                        f"{norm:.6g}")
    if unplaced:
        node, step = unplaced[0]
        return Check(CLIP_CHECK, False, f"{detail}; {len(unplaced)} not checked: the model before them, which "
                                        f"λθ needs, is not recomputed (first: node {node}'s step {step})")
    return Check(CLIP_CHECK, True, detail)
