"""Random-walk DP-SGD ex ante: the realized-path loss averaged over simulated walks, with its confidence interval.

An observer who is not told the path sees a mixture over the paths of the published W, which do not
depend on the data, so its Rényi divergence is at most (1/(α−1)) log E_path exp((α−1)·loss(path))
(exp((α−1) D_α) is jointly convex). The expectation is a Monte-Carlo mean over simulated walks, so the
column is an estimate and comes with an interval: each pair's X = exp((α−1)·loss) is bounded (every
loss is finite), and the normal (CLT) interval of its mean, mapped through (1/(α−1)) log, is
[estimate, upper] at CONFIDENCE, per pair (not simultaneous over the pairs); the report leads with the
upper end. It is asymptotic, which is why the walks keep coming, batch by batch, until the median
pair's interval is narrow: its half-width at most TARGET_RELATIVE_HALF_WIDTH of the estimate (at least
MIN_WALKS walks, at most MAX_WALKS). No walk's losses are kept: each batch's mean and sum of squared
deviations of X are merged into the running ones (Chan et al.), in units of exp(the largest
(α−1)·loss so far), so exp never overflows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from coordinator_tools.audit.protocols.rw_sgd import theory
from coordinator_tools.audit.protocols.token_sum.walks import simulate_walks

CONFIDENCE = 0.95  # two-sided, per pair
TARGET_RELATIVE_HALF_WIDTH = 0.02
MIN_WALKS = 1000
MAX_WALKS = 20000


@dataclass
class LogMeanExp:
    """(1/(α−1)) log of the mean of exp((α−1)·x) over samples added in batches (axis 0), element-wise, and the
    normal interval of that mean: kept as the mean and the sum of squared deviations of exp((α−1)·x − shift),
    `shift` the largest (α−1)·x so far."""

    order: float
    count: int = 0
    shift: np.ndarray | float = 0.0
    mean: np.ndarray | float = 0.0
    squares: np.ndarray | float = 0.0

    def add(self, batch: np.ndarray) -> None:
        """Merge a batch of samples (axis 0) into the running mean and squared deviations."""
        scaled = (self.order - 1) * np.asarray(batch, dtype=float)
        shift = np.maximum(self.shift, scaled.max(axis=0)) if self.count else scaled.max(axis=0)
        rescale = np.exp(self.shift - shift)
        values = np.exp(scaled - shift)
        size, total = len(values), self.count + len(values)
        batch_mean = values.mean(axis=0)
        gap = batch_mean - self.mean * rescale
        self.squares = (self.squares * rescale**2 + ((values - batch_mean) ** 2).sum(axis=0)
                        + gap**2 * self.count * size / total)
        self.mean = self.mean * rescale + gap * size / total
        self.shift, self.count = shift, total

    def estimate(self) -> np.ndarray:
        return (self.shift + np.log(self.mean)) / (self.order - 1)

    def upper(self, confidence: float = CONFIDENCE) -> np.ndarray:
        """The upper end of the two-sided normal interval at `confidence` (infinite below two samples)."""
        if self.count < 2:
            return np.full(np.shape(self.mean), np.inf)
        spread = np.sqrt(self.squares / (self.count - 1) / self.count)
        return (self.shift + np.log(self.mean + ndtri((1 + confidence) / 2) * spread)) / (self.order - 1)


@dataclass(frozen=True)
class ExAnte:
    """The ex-ante RDP [u, v] at one order (diagonal NaN), the upper end of its interval, and how it was drawn."""

    rdp: np.ndarray
    rdp_upper: np.ndarray
    walks: int
    seed: int
    adaptive: bool  # walks drawn until the median pair's interval was narrow, or as many as asked for
    confidence: float = CONFIDENCE

    def to_json(self) -> dict[str, object]:
        """How the estimate was drawn and how wide its intervals came out (relative to the estimate, in RDP)."""
        widths = relative_half_widths(self.rdp, self.rdp_upper)
        rule = (f"until the median pair's relative half-width <= {TARGET_RELATIVE_HALF_WIDTH:g} ({MIN_WALKS} to "
                f"{MAX_WALKS} walks)" if self.adaptive else "as many walks as asked for")
        return {"walks": self.walks, "seed": self.seed, "confidence": self.confidence, "walks_rule": rule,
                "interval": "normal (CLT) interval of the mean of exp((alpha-1) loss) over the walks, per pair",
                "relative_half_width": {"median": float(np.median(widths)) if widths.size else None,
                                        "max": float(widths.max()) if widths.size else None}}


def simulate(W: np.ndarray, steps: int, start: int, cap: int | None, *, alpha: float, sigma: float,
             sensitivity: float, seed: int, walks: int | None = None) -> ExAnte:
    """The realized-path bound (`theory.realized_path_rdp`) over walks of W from `start`, drawn in batches from
    `seed`: until the median pair's interval is narrow (see the module), or exactly `walks` of them; σ > 0."""
    n = len(W)
    rng = np.random.default_rng(seed)
    scale = alpha * (sensitivity / sigma) ** 2 / 2
    batch = max(1, theory.BATCH_ENTRIES // (steps * n))
    most = MAX_WALKS if walks is None else walks
    mixture = LogMeanExp(alpha)
    off_diagonal = ~np.eye(n, dtype=bool)
    while mixture.count < most:
        paths = simulate_walks(W, steps, start, min(batch, most - mixture.count), rng)
        mixture.add(scale * theory.path_geometry(paths, theory.contributions(paths, cap, n), n))
        if walks is None and mixture.count >= MIN_WALKS and _narrow(mixture, off_diagonal):
            break
    return ExAnte(np.where(off_diagonal, mixture.estimate(), np.nan), np.where(off_diagonal, mixture.upper(), np.nan),
                  mixture.count, seed, adaptive=walks is None)


def relative_half_widths(estimate: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """(upper − estimate) / estimate of the pairs with a positive finite estimate (the diagonal, NaN, left out)."""
    positive = (estimate > 0) & np.isfinite(estimate)
    return (upper[positive] - estimate[positive]) / estimate[positive]


def _narrow(mixture: LogMeanExp, pairs: np.ndarray) -> bool:
    """Whether the median pair's interval is within the target (no pair with a loss: nothing to narrow)."""
    widths = relative_half_widths(mixture.estimate()[pairs], mixture.upper()[pairs])
    return widths.size == 0 or bool(np.median(widths) <= TARGET_RELATIVE_HALF_WIDTH)
