"""DECOR (ICML 2024), its LibSVM experiment: DECOR against local DP and central DP at the same privacy.

The paper trains logistic regression on a9a with n = 16 users on a ring and a grid, T = 2000
steps, per-example clip C = 0.1, batch 64, δ = 1e-5, and plots the loss against user-level
ε ∈ {3, 5, 7, 10, 15, 20, 25, 30, 40} for LDP (σ_ldp = C √(2/ε_step)), CDP (σ_cdp = σ_ldp/√n) and
DECOR (a pair σ ∈ [σ_cdp, σ_ldp], σ_cor its SecLDP accountant accepts); its claim: DECOR closely
tracks CDP and outperforms LDP (facts from the paper and its public code, reproduce_libsvm.py).

Here every point is netdp's: decor-gd (one gossip round per step, the paper's Alg. 1) at
σ_cor = RATIO σ, σ calibrated so that its exact column (the joint-step composition bound, a proven
bound against every curious user who knows its own secrets) meets the worst-pair ε; the LDP and
CDP baselines at the same ε over the T steps (`compare.learning_designs`). The rows: the baselines'
noise ratio beside the code's √n, each accuracy, and the figure's two shapes (DECOR ≥ LDP, DECOR
near CDP) as verdicts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.figure import Figure

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import Target, baseline_sigmas, summarize
from coordinator_tools.compare.designs import calibrated
from coordinator_tools.compare.learning_designs import LearningDesignSetup, baseline_accuracy
from coordinator_tools.compare.setup import CompareSetup
from coordinator_tools.dataprep.learning_data import write_minibatch_split
from coordinator_tools.reproduce.outcome import (
    DIFFERS,
    FINDING,
    REPRODUCED,
    Context,
    Deviation,
    Outcome,
    Reproduction,
    Row,
    Verdict,
)
from coordinator_tools.reproduce.runs import audited_run, derived_seeds
from coordinator_tools.topology.generators import generate

PAPER_N, PAPER_STEPS, PAPER_EPS = 16, 2000, (3, 5, 7, 10, 15, 20, 25, 30, 40)


class Size(NamedTuple):
    """What one scale runs: the ring's size, the steps, the privacy levels."""

    n: int
    steps: int
    eps: tuple[float, ...]


FULL, QUICK = Size(16, 40, (3.0, 10.0, 40.0)), Size(8, 8, (3.0, 10.0))
RATIO = 5.0  # σ_cor / σ: the paper's code pairs σ_cor of 14 to 66 with σ of 2 to 7 at ε = 10 (ratios 2 to 33)
DATASET, CLIP, BATCH, LEARNING_RATE = "breast_cancer", 1.0, 8, 0.5
NEAR_CDP = 0.05  # DECOR "closely tracks" CDP: accuracy within this of CDP's
SAME = 0.01  # accuracies this close are one test example apart on breast_cancer's 114: no ranking
UNIT = "test accuracy"


def run(ctx: Context) -> Outcome:
    """Calibrate, run and audit decor-gd at every ε on the ring; the LDP and CDP baselines at the same ε."""
    n, steps, targets = FULL if ctx.scale == "full" else QUICK
    seeds = derived_seeds(ctx.seed, ["data", *(f"noise_eps_{eps:g}" for eps in targets)])
    learning = CompareSetup(graph="ring", n=n, dataset=DATASET, steps_per_node=steps, clip=CLIP, batch=BATCH,
                            gossip_learning_rate=LEARNING_RATE)
    graph = generate("ring", n=n)
    rows: list[Row] = []
    curves: dict[str, list[float]] = {"DECOR": [], "LDP": [], "CDP": []}
    setup_json: dict[str, object] = {"graph": "ring", "n": n, "steps": steps, "dataset": DATASET, "clip": CLIP,
                                     "batch": BATCH, "learning_rate": LEARNING_RATE, "sigma_cor_ratio": RATIO,
                                     "target": "worst-pair eps at delta 1e-5, curious user"}
    data_dir = ctx.folder / "data"
    runs: list[Path] = [Path("data")]
    for eps in targets:
        setup = LearningDesignSetup(graph=graph, graph_name="ring", target=Target(eps, "worst"),
                                    dimension=learning.dimension, sensitivity=learning.sensitivity,
                                    learning=learning, decor_ratio=RATIO)
        if not (data_dir / "test.npz").exists():
            write_minibatch_split(DATASET, BATCH, setup.topology(setup.params("muffliato", 1.0), run_id="data"),
                                  data_dir, seeds["data"])
        params = calibrated(setup, "decor")
        name = f"decor-eps-{eps:g}"
        audit = audited_run(ctx.subfolder(name), setup.topology(params, run_id=name),
                            noise_seed=seeds[f"noise_eps_{eps:g}"], data=data_dir)
        runs += [Path(name) / "run", Path(name) / "audit"]
        exact = pair_matrix(read_pairs(audit.path, ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", n)
        sigmas = baseline_sigmas(n, sensitivity=setup.sensitivity, delta=setup.delta, target=setup.target,
                                 releases=steps)
        accuracy = {"DECOR": float(audit.report["utility"]["netdp"][-1]),  # type: ignore[index]
                    "LDP": baseline_accuracy(setup, sigmas["ldp"], data_dir),
                    "CDP": baseline_accuracy(setup, sigmas["central"], data_dir)}
        for key, value in accuracy.items():
            curves[key].append(value)
        setup_json[f"eps {eps:g}"] = {"sigma_decor": params.sigma, "sigma_ldp": sigmas["ldp"],
                                      "sigma_cdp": sigmas["central"]}
        rows += _rows(eps, n, float(summarize(exact, "worst")), params.sigma, sigmas, accuracy)
    return Outcome(rows=rows, figures={"decor_accuracy_vs_eps": _figure(targets, curves, n, steps)}, runs=runs,
                   seeds=seeds, setup=setup_json, summary=_summary(rows), deviations=_deviations(n, steps))


def _rows(eps: float, n: int, worst: float, sigma: float, sigmas: dict[str, float],
          accuracy: dict[str, float]) -> list[Row]:
    """One ε: the calibration, the baselines' noise ratio, the three accuracies and the figure's two shapes."""
    decor, ldp, cdp = accuracy["DECOR"], accuracy["LDP"], accuracy["CDP"]
    return [
        Row(f"eps {eps:g}: DECOR's audited worst-pair eps (curious user)", eps, worst, "eps at delta=1e-5", 1e-3,
            note="calibrated to the target on the exact column (a proven bound); the paper's points are at eps"),
        Row(f"eps {eps:g}: sigma_ldp / sigma_cdp", math.sqrt(n), sigmas["ldp"] / sigmas["central"], "ratio", 1e-6,
            note="the paper's code: sigma_cdp = sigma_ldp / sqrt(n), the same eps for one user's T steps"),
        Row(f"eps {eps:g}: DECOR's sigma between sigma_cdp and sigma_ldp", None,
            (sigma - sigmas["central"]) / (sigmas["ldp"] - sigmas["central"]), "share of the interval",
            note="the paper's code searches sigma in [sigma_cdp, sigma_ldp] (0: central DP's noise, 1: local DP's)"),
        Row(f"eps {eps:g}: DECOR accuracy", None, decor, UNIT, note="a point of the paper's curve (a9a loss there)"),
        Row(f"eps {eps:g}: LDP accuracy", None, ldp, UNIT, note="trusted-curator simulation at sigma_ldp^2 / n"),
        Row(f"eps {eps:g}: CDP accuracy", None, cdp, UNIT, note="trusted-curator simulation at sigma_cdp^2 / n"),
        Row(f"eps {eps:g}: DECOR accuracy minus LDP's", None, decor - ldp, UNIT,
            note="the paper: DECOR outperforms LDP",
            verdict=Verdict(REPRODUCED, f"DECOR {decor:.3f} against LDP {ldp:.3f}"
                                        f"{' (within one test example: saturated)' if decor < ldp else ''}.")
            if decor >= ldp - SAME else Verdict(FINDING, f"DECOR {decor:.3f} is below LDP {ldp:.3f} at eps {eps:g}.")),
        Row(f"eps {eps:g}: CDP accuracy minus DECOR's", None, cdp - decor, UNIT,
            note=f"the paper: DECOR closely tracks CDP (here: within {NEAR_CDP:g})",
            verdict=Verdict(REPRODUCED, f"DECOR {decor:.3f} within {NEAR_CDP:g} of CDP {cdp:.3f}.")
            if cdp - decor <= NEAR_CDP else
            Verdict(DIFFERS, f"DECOR {decor:.3f} is {cdp - decor:.3f} below CDP {cdp:.3f}: netdp's exact bound is "
                             "a proven one, not the paper's SecLDP accountant, and the run is short (deviations).")),
    ]


def _deviations(n: int, steps: int) -> list[Deviation]:
    return [
        Deviation("dataset", "a9a (LibSVM, 123 features)", f"{DATASET} (bundled, logistic regression)",
                  "a9a is not bundled; nothing is downloaded"),
        Deviation("n and graph", f"n = {PAPER_N}, ring and grid", f"n = {n}, ring", "minutes, not hours"),
        Deviation("steps", f"T = {PAPER_STEPS}, clip 0.1, batch 64, learning rate 0.1",
                  f"T = {steps}, clip {CLIP:g}, batch {BATCH}, learning rate {LEARNING_RATE:g}",
                  "the same calibration rule over fewer steps"),
        Deviation("accountant", "the SecLDP accountant (Thm 1) picks (sigma, sigma_cor)",
                  f"sigma_cor = {RATIO:g} sigma, sigma calibrated on netdp's exact column (joint-step composition)",
                  "a proven bound for every curious user; reports no more privacy than it can prove"),
        Deviation("baselines", "LDP and CDP trained by D-SGD on the graph and by a server",
                  "both simulated as a trusted curator with each one's noise on the mean gradient",
                  "what perfect averaging of the released steps gives; the same seeds"),
        Deviation("metric", "test loss (and accuracy) over 5 seeds", "test accuracy, one seed", "quick comparison"),
    ]


def _figure(targets: tuple[float, ...], curves: dict[str, list[float]], n: int, steps: int) -> Figure:
    figure = Figure(figsize=(5.5, 4))
    axis = figure.subplots()
    for (label, values), colour, marker in zip(curves.items(), ("tab:green", "tab:orange", "tab:purple"), "o^D"):
        axis.plot(targets, values, marker=marker, color=colour, label=label)
    axis.set_xlabel("worst-pair eps (delta = 1e-5)")
    axis.set_ylabel(UNIT)
    axis.set_title(f"DECOR vs LDP vs CDP, ring n = {n}, T = {steps}")
    axis.grid(True, alpha=0.3)
    axis.legend()
    return figure


def _summary(rows: list[Row]) -> str:
    measured = {row.quantity: row.measured for row in rows}
    above = [q for q in measured if q.endswith("DECOR accuracy minus LDP's")]
    near = [q for q in measured if q.endswith("CDP accuracy minus DECOR's")]
    beats = sum(measured[q] >= -SAME for q in above)
    tracks = sum(measured[q] <= NEAR_CDP for q in near)
    gap = float(np.max([measured[q] for q in near]))
    return (f"DECOR's accuracy is at least LDP's (to {SAME:g}) at {beats} of {len(above)} privacy levels and within "
            f"{NEAR_CDP:g} of "
            f"CDP's at {tracks} of {len(near)} (largest gap {gap:.3f}), each at the worst-pair eps netdp proves.")


REPRODUCTION = Reproduction(
    name="decor-libsvm",
    paper="DECOR (ICML 2024)",
    figure="LibSVM a9a experiment (loss against user-level eps: LDP, DECOR, CDP)",
    claim="at the same user-level privacy, DECOR closely tracks central DP's utility and outperforms local DP",
    run=run,
    full_scale=f"ring n = {FULL.n}, T = {FULL.steps}, eps {', '.join(f'{e:g}' for e in FULL.eps)}: decor-gd "
               "calibrated, run and audited at each (minutes)",
    quick_scale=f"ring n = {QUICK.n}, T = {QUICK.steps}, eps {', '.join(f'{e:g}' for e in QUICK.eps)} (about a minute)",
)
