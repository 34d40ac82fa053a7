"""Comparing logged payloads with values recomputed from private inputs and noise.

Each protocol recomputes its nodes' values along its realized transcript; agreement with
every logged payload shows the transcript (and so the accountants' model) is what ran.
This module only holds the verdict and the comparison at one relative precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from coordinator_tools.audit.records import Finding
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor

# Recomputed values match logged ones to this relative precision (summation order differs).
TRAJECTORY_RTOL = 1e-9


@dataclass(frozen=True)
class TrajectoryCheck:
    """How well the recomputed values reproduce every logged payload."""

    compared: int
    max_relative_deviation: float
    mismatches: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return self.compared > 0 and not self.mismatches


def missing_inputs(needed: set[int], available: set[int]) -> TrajectoryCheck | None:
    """The failed check when some needed node has no usable private log, else None."""
    missing = sorted(needed - available)
    if not missing:
        return None
    finding = Finding("error", "missing_private_input", missing[0], f"no usable private log for nodes {missing}")
    return TrajectoryCheck(0, float("nan"), (finding,))


@dataclass
class PayloadComparison:
    """Accumulates logged-versus-recomputed comparisons, relative to `scale` (the largest |x^0|)."""

    scale: float
    rtol: float = TRAJECTORY_RTOL
    compared: int = 0
    worst: float = 0.0
    mismatches: list[Finding] = field(default_factory=list)

    def compare(self, node: int, logged: viewlog_pb2.Tensor | np.ndarray, recomputed: np.ndarray, what: str) -> None:
        """Compare one logged value (a payload, or a private input, found in `node`'s logs) with its recomputed one."""
        value = logged if isinstance(logged, np.ndarray) else from_tensor(logged)
        deviation = float(np.max(np.abs(value - recomputed), initial=0.0)) / (self.scale or 1.0)
        self.worst = max(self.worst, deviation)
        self.compared += 1
        if deviation > self.rtol:
            self.mismatches.append(Finding("error", "payload_not_reproduced", node,
                                           f"{what} is off by {deviation:.3g} (relative)"))

    def unexplained(self, node: int, what: str) -> None:
        """A logged payload the transcript never computes."""
        self.mismatches.append(Finding("error", "unexplained_payload", node, what))

    def result(self) -> TrajectoryCheck:
        return TrajectoryCheck(self.compared, self.worst, tuple(self.mismatches))
