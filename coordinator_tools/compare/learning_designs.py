"""`netdp compare --designs ... --task learning`: noise designs for private D-SGD at one target, run, audited.

Every design learns `netdp compare`'s logistic regression (`compare.setup.CompareSetup`: the bundled
dataset split iid, clip C, minibatch b, replace-one adjacency so Δ = 2C/b, T gradient steps at η)
on the user's graph, with σ calibrated by the planner so that its exact loss against a curious
node meets the target (mean or worst-pair ε at δ = 1e-5). Its utility is the mean test accuracy of
the nodes' final models (`utility_kind` accuracy).

* muffliato: Muffliato-GD with one plain gossip round per step (D-SGD with independent noise only).
* decor: DECOR learning (`decor-gd`, the paper's Alg. 1: one gossip round per step) with pairwise
  noise at σ_cor = LEARNING_RATIO σ: against a curious node each step's pairwise draws on the edges
  it does not hold hide its neighbours' states (`audit.protocols.decor_gd.steps`), so σ calibrates
  lower, while the draws, which cancel only in the network's sum, stay in the individual models
  until gossip averages them out.
* zero-sum: Zip-DL learning (`zero-sum-gd`: one round per step, each neighbour its model plus a zero-sum
  share, no other noise). Its exact bound (`audit.protocols.zero_sum_gd.steps`) counts each node's
  gradients accumulating in a model no fresh noise of its own covers, so σ calibrates far higher.
* secure-neighbourhood: `secure-neighbourhood-gd` (one gossip round per step) whose gossip sends only
  masked models; its exact column gives every mask to the observer (a bound that counts none of the
  masks' protection), so σ calibrates as Muffliato-GD's and its accounting adds an eavesdropper's.
* ldp and central: closed forms at the same target over the T steps (ldp: every node releases each
  noisy step; central: a trusted curator adds noise to each step's mean gradient), their accuracy
  the trusted curator's training simulated from the split (seeded) with the mean gradient's noise
  each implies (σ_ldp²/n and σ_central²/n): what perfect averaging of the released steps gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coordinator_tools.audit.plan import baseline_sigmas
from coordinator_tools.audit.protocols.muffliato_gd.utility import BASELINE_SEED, TEST_FILE, central_curve
from coordinator_tools.compare.designs import (
    BASELINES,
    DesignSetup,
    audited_rows,
    baseline_eps,
    row,
)
from coordinator_tools.compare.designs import run_designs as design_rows
from coordinator_tools.compare.setup import GOSSIP_ALPHA, CompareSetup
from node import data as node_data
from node.data import node_data_file
from node.learning import LocalData
from node.protocols.decor_gd import DecorGDParams
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.secure_neighbourhood_gd import SecureNeighbourhoodGDParams
from node.protocols.zero_sum_gd import ZeroSumGDParams
from node.topology import ProtocolParams

# each design's learning protocol
PROTOCOLS = {"muffliato": "muffliato-gd", "decor": "decor-gd", "zero-sum": "zero-sum-gd",
             "secure-neighbourhood": "secure-neighbourhood-gd"}
LEARNING_RATIO = 1.0  # σ_cor / σ of decor's learning runs
ACCURACY = "accuracy"


@dataclass(frozen=True)
class LearningDesignSetup(DesignSetup):
    """The designs' shared graph and target, and the learning task every design trains (`CompareSetup`)."""

    learning: CompareSetup = field(default_factory=CompareSetup)
    decor_ratio: float = LEARNING_RATIO  # σ_cor / σ of decor's runs

    def params(self, design: str, sigma: float) -> ProtocolParams:
        """A protocol design's published learning parameters at noise σ per gradient step."""
        task = self.learning
        common = dict(sigma=sigma, sensitivity=task.sensitivity, alpha=GOSSIP_ALPHA, dimension=task.dimension,
                      task="logistic", clip=task.clip, batch=task.batch, adjacency="example",
                      steps=task.steps_per_node, learning_rate=task.gossip_learning_rate)
        if design == "muffliato":
            return MuffliatoGDParams(**common, gossip_rounds=1, accelerated=False)  # type: ignore[arg-type]
        if design == "zero-sum":
            return ZeroSumGDParams(**common)  # type: ignore[arg-type]
        if design == "secure-neighbourhood":
            return SecureNeighbourhoodGDParams(**common, gossip_rounds=1)  # type: ignore[arg-type]
        return DecorGDParams(**common, sigma_cor_ratio=self.decor_ratio)  # type: ignore[arg-type]


def final_accuracy(report: Mapping[str, Any]) -> float:
    """A learning run's utility: the nodes' mean test accuracy after the last step."""
    return float(report["utility"]["netdp"][-1])


def baseline_rows(setup: LearningDesignSetup, design: str, threat_models: Sequence[str],
                  data_dir: Path) -> list[dict[str, object]]:
    """A closed-form baseline at the target over the T steps, the same ε under every threat model; its accuracy
    the trusted curator's simulated training with the mean gradient's noise its σ implies."""
    steps = setup.learning.steps_per_node
    sigma = baseline_sigmas(setup.n, sensitivity=setup.learning.sensitivity, delta=setup.delta,
                            target=setup.target, releases=steps)[design]
    mean_eps, worst_eps = baseline_eps(setup, design, sigma, releases=steps)
    accuracy = baseline_accuracy(setup, sigma, data_dir)
    return [row(design, model, mean_eps, worst_eps, accuracy, ACCURACY) for model in threat_models]


def baseline_accuracy(setup: LearningDesignSetup, sigma: float, data_dir: Path) -> float:
    """The trusted curator's final test accuracy when n nodes' releases at σ are averaged every step (seeded)."""
    params = setup.params("muffliato", sigma)
    assert isinstance(params, MuffliatoGDParams)
    shards = [LocalData(*node_data.load_learning_data(node_data_file(data_dir, v), params.dimension))
              for v in range(setup.n)]
    test_x, test_y = node_data.load_learning_data(data_dir / TEST_FILE, params.dimension)
    return central_curve(params, shards, test_x, test_y, np.random.default_rng(BASELINE_SEED))[-1]


def run_designs(setup: LearningDesignSetup, designs: Sequence[str], out: Path, data_dir: Path,
                run: Callable[[ProtocolParams, Path], Path]) -> list[dict[str, object]]:
    """Every design's rows, as `designs.run_designs` makes them, each audited run's utility its final accuracy."""
    def audit(design: str, rundir: Path, folder: Path) -> list[dict[str, object]]:
        return audited_rows(design, rundir, folder, data_dir, setup.delta, protocol=PROTOCOLS[design],
                            utility=final_accuracy, utility_kind=ACCURACY)

    return design_rows(setup, designs, out, data_dir, run, audit=audit,
                       baselines=lambda design, models: baseline_rows(setup, design, models, data_dir))


def notes(setup: LearningDesignSetup, designs: Sequence[str]) -> list[str]:
    """The choices behind the numbers, for designs.json and the console."""
    task = setup.learning
    lines = [f"target: {setup.target.rule} eps {setup.target.epsilon:g} at delta {setup.delta:g} against a curious "
             f"node over {task.steps_per_node} steps; logistic regression on {task.dataset}, clip {task.clip:g}, "
             f"minibatch {task.batch} (Delta = {task.sensitivity:g}), learning rate {task.gossip_learning_rate:g}; "
             "utility: mean test accuracy of the nodes' final models"]
    if "muffliato" in designs:
        lines.append("muffliato: muffliato-gd, one plain gossip round per step; its auditor does not account an "
                     "eavesdropper")
    if "decor" in designs:
        lines.append(f"decor: decor-gd, one gossip round per step (DECOR Alg. 1), sigma_cor = {setup.decor_ratio:g} "
                     "sigma; exact is the joint-step composition bound")
    if "zero-sum" in designs:
        lines.append("zero-sum: zero-sum-gd, one round per step (Zip-DL), the shares its only noise; exact is the "
                     "hidden-state share composition bound, whose per-step sensitivity grows with the steps")
    if "secure-neighbourhood" in designs:
        lines.append("secure-neighbourhood: secure-neighbourhood-gd, one masked gossip round per step; exact gives "
                     "every mask to the observer (a bound claiming nothing from the masks), no paper column")
    if any(d in BASELINES for d in designs):
        lines.append("ldp and central: closed forms at the same target over the steps; accuracy of a trusted "
                     "curator's training simulated with the mean gradient's noise each implies (seeded)")
    return lines
