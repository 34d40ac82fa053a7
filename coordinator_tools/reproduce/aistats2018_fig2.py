"""AISTATS 2018 Fig. 2: test accuracy of personalized private CD against the privacy budget.

§5.1 ("Private setting"): n = 100 agents on the synthetic linear-classification task, every agent
splitting its budget ε̄ equally over its T_i updates by Thm 1 at δ̄ = e^-5; Fig. 2(c) plots the
final mean test accuracy for several budgets beside the purely local models, and the text states
that even ε̄ = 0.15 "significantly outperform[s] the purely local models". The figure has no
numbers, so its shape is compared: accuracy rising with the budget, between the purely local
models and non-private CD.

netdp regenerates the paper's task (`coordinator_tools.dataprep.personalized_task`: targets at random
angles, similarities exp((cos φ − 1)/γ), 10 to 100 points per agent, 5 % label noise; p = 5
features) with the `netdp demo --protocol personalized-cd` parameters (μ = 1, L₀ = 0.3, no warm
start). As the paper does, T_i is tuned per budget on a validation split: each agent's held-out
points are halved, every T_i of a grid is run against the first half, and the best one is run
again (the same noise seed, so the same models) against the second half, which scores it.
Non-private CD runs once at the demo's T_i = 5. Every run is audited: the accuracy is the run's
own; each agent's spend is composed by Thm 1 (the paper's bound, equal to ε̄ by construction) and
by the PLD accountant (netdp's exact), both shown.

The paper's p = 100 (Fig. 2(a,b), Fig. 3) is a second curve, T_i tuned the same way, at both scales.
The paper's private warm start (Fig. 2(b,c), supplementary C: each agent releases its noisy local
model at ε = 0.05, paid from its budget, then makes `PROPAGATION_STEPS` wake-ups of model
propagation (16), post-processing the audit charges nothing for, its replay recomputing every
step from released models) is one more run at each p at the largest budget, its T_i tuned on the
validation split too: its Laplace scale per coordinate is many times the models' own, so the curves
start from zero and the extra rows measure the difference. Where private CD at the paper's p and n
stays below the purely local models at the paper's small budget, that is a finding, stated with the
recipe that gives it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from coordinator_tools.audit.learning_figures import learning_drawers
from coordinator_tools.cluster.demo_protocols import PersonalizedDemo
from coordinator_tools.dataprep.personalized_task import PersonalizedTask, generate_task, task_topology, write_task
from coordinator_tools.reproduce.outcome import (
    DIFFERS,
    FINDING,
    REPRODUCED,
    Context,
    Deviation,
    Outcome,
    Reproduction,
    Row,
    StatementVsProof,
    Verdict,
)
from coordinator_tools.reproduce.runs import audited_run, derived_seeds, rank_trend
from coordinator_tools.topology.build import new_run_id
from node.budget import equal_split, theorem1_epsilon
from node.learning import LocalData
from node.personalized import LOCAL_MODEL_TOLERANCE, AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import Topology

# §5.1: "Consider a set of n = 100 agents"; "Theorem 1 with δ̄_i = exp(-5)"; "even under a small privacy budget
# (ε̄ = 0.15), the resulting models significantly outperform the purely local models".
PUBLISHED_AGENTS = 100
PUBLISHED_DELTA = math.exp(-5)
SMALL_BUDGET = 0.15
# §5.1: "a private warm start solution with epsilon = 0.05" (Fig. 2(b), and "the same private warm start strategy" in
# Fig. 2(c)); supplementary C smooths it by model propagation, whose number of steps the paper does not give.
WARM_START_EPSILON = 0.05
PROPAGATION_STEPS = 10  # wake-ups of model propagation per agent before its updates
WARM_START_RUN = "eps{:g}-warm-start"  # the extra run's folder, at the largest budget
FULL_BUDGETS = (SMALL_BUDGET, 0.5, 1.0, 2.0, 5.0, 10.0)
QUICK_AGENTS, QUICK_BUDGETS = 20, (1.0, 5.0)
FULL_UPDATES, QUICK_UPDATES = (1, 2, 5, 10, 20), (1, 5)  # the T_i tried per budget on the validation split
WIDE_DIMENSION = 100  # Fig. 2(a,b) and Fig. 3's p: a second curve
QUICK_WIDE_DIMENSION = WIDE_DIMENSION  # the second curve's p at quick scale (p costs little: the runs are per agent)
DIMENSION = PersonalizedDemo.dimension
# Agents' clocks tick faster than the demo's 2/s: a virtual run's wall time is the clocks', and the rate changes
# nothing else (i.i.d. Poisson clocks of one rate give a uniformly random wake-up order whatever the rate).
TICK_RATE = 20.0
SPEND_RTOL = 1e-6  # Thm 1's composition of the logged per-update ε against ε̄ (equal_split meets it from below)
NON_PRIVATE = "non-private"
TRANSCRIPT_CHECK = "transcript reproduces the logged payloads"  # the audit's replay of every broadcast
MANY_UPDATES = 100  # an agent with this many equal updates shows Thm 1's printed middle term apart from Kairouz's


def printed_theorem1(epsilons: Sequence[float], delta: float) -> float:
    """Thm 1 as printed in the main text: its middle term reads log(e + sqrt(Σε²/δ̄)), not Kairouz et al.'s Thm 3.5
    log(e + sqrt(Σε²)/δ̄); the smaller of the three bounds, as `node.budget.theorem1_epsilon` takes them."""
    eps = np.asarray(epsilons, dtype=float)
    squares, drift = float(np.sum(eps**2)), float(np.sum(eps * np.tanh(eps / 2.0)))
    middle = drift + math.sqrt(2.0 * squares * math.log(math.e + math.sqrt(squares / delta)))
    return min(float(eps.sum()), middle, drift + math.sqrt(2.0 * squares * math.log(1.0 / delta)))


def run(ctx: Context) -> Outcome:
    """Run and audit private CD at every budget and non-private CD once, on one task, and compare with Fig. 2; then
    the paper's p with T_i tuned the same way; at each p one more run from the paper's warm start."""
    full = ctx.scale == "full"
    n, budgets = (PUBLISHED_AGENTS, FULL_BUDGETS) if full else (QUICK_AGENTS, QUICK_BUDGETS)
    grid = FULL_UPDATES if full else QUICK_UPDATES
    wide = WIDE_DIMENSION if full else QUICK_WIDE_DIMENSION
    top = max(budgets)
    wide_budgets = budgets if full else (top,)
    seeds = derived_seeds(ctx.seed, ["task", *(f"eps{budget:g}_noise" for budget in budgets), "non_private_noise",
                                     *(f"p{wide}_{purpose}" for purpose in
                                       ("task", *(f"eps{budget:g}_noise" for budget in wide_budgets)))])
    task = generate_task(n, DIMENSION, seeds["task"])
    narrow = _tuned_curve(ctx, task, budgets, grid, {budget: seeds[f"eps{budget:g}_noise"] for budget in budgets})
    non_private = audited_run(ctx.folder / NON_PRIVATE, _topology(task, None, PersonalizedDemo.updates),
                              noise_seed=seeds["non_private_noise"], data=narrow.data).report
    wide_task = generate_task(n, wide, seeds[f"p{wide}_task"])
    broad = _tuned_curve(ctx, wide_task, wide_budgets, grid,
                         {b: seeds[f"p{wide}_eps{b:g}_noise"] for b in wide_budgets}, f"p{wide}/")
    private, tuning = narrow.reports, narrow.tuning
    rows = _rows(private, non_private, n) + _tuning_rows(tuning)
    rows.append(_warm_start_row(DIMENSION, top, narrow, _local_model_scale(task)))
    rows += _wide_rows(wide, top, broad, _local_model_scale(wide_task), n)
    setup = {"task": "AISTATS 2018 §5.1 synthetic linear classification, regenerated", "agents": n,
             "dimension": DIMENSION, "gamma": task.info.gamma, "edges": len(task.weights),
             "train_sizes": [min(task.info.train_sizes), max(task.info.train_sizes)],
             "test_per_agent": task.info.test_per_agent, "mu": PersonalizedDemo.mu,
             "lipschitz": PersonalizedDemo.lipschitz,
             "updates": {"grid": list(grid), "chosen": {format(b, "g"): _best(tuning[b]) for b in budgets},
                         "non_private": PersonalizedDemo.updates,
                         "validation": "the first half of every agent's held-out points; the second half tests"},
             "delta": PersonalizedDemo.delta, "tick_rate": TICK_RATE, "budget_split": "equal (Thm 1)",
             "warm_start": {"main_curve": None, "extra_run": _warm_start_setup(top, narrow, "")},
             "wide": {"dimension": wide, "edges": len(wide_task.weights), "folder": f"p{wide}",
                      "budgets": list(wide_budgets), "updates": {format(b, "g"): _best(broad.tuning[b])
                                                                 for b in wide_budgets},
                      "warm_start": _warm_start_setup(top, broad, f"p{wide}/")},
             "budgets": list(budgets), "runs": "virtual, seeded simulation noise: at each p one per budget and T_i "
                                               "on the validation split and the chosen T_i again on the test split, "
                                               "the same from the paper's warm start at the largest budget; one "
                                               "non-private run at p = " f"{DIMENSION}"}
    figures = {"fig2_accuracy_vs_budget": _accuracy_figure(private, non_private, {wide: broad}, narrow),
               "fig2_budget_spent": _spend_figure(private)}
    return Outcome(rows=rows, figures=figures, runs=[*narrow.runs, *(Path(NON_PRIVATE) / part for part in
                                                                    ("run", "audit")), *broad.runs],
                   seeds=seeds, setup=setup, summary=_summary(private, non_private, wide, broad),
                   deviations=_deviations(n, grid, wide, wide_budgets), statement_vs_proof=_middle_term(top))


@dataclasses.dataclass(frozen=True)
class Curve:
    """Private CD at one p, T_i tuned per budget on the validation split: the test runs' reports and every T_i's
    validation accuracy, and the same at the largest budget from the paper's warm start; the runs' folders and the
    test data folder."""

    reports: dict[float, Mapping[str, object]]
    tuning: dict[float, dict[int, float]]
    warm: Mapping[str, object]
    warm_tuning: dict[int, float]
    runs: list[Path]
    data: Path


def _warm_start_setup(budget: float, curve: Curve, prefix: str) -> dict[str, object]:
    """The warm-started run as setup records it."""
    return {"budget": budget, "epsilon": WARM_START_EPSILON, "propagation_steps": PROPAGATION_STEPS,
            "updates": _best(curve.warm_tuning), "folder": prefix + WARM_START_RUN.format(budget),
            "charged": "the warm start's release only: propagation reads released models"}


def _tuned_curve(ctx: Context, task: PersonalizedTask, budgets: Sequence[float], grid: Sequence[int],
                 noise: Mapping[float, int], prefix: str = "") -> Curve:
    """Private CD on `task` at every budget, and from the paper's warm start at the largest, each with T_i tuned on the
    validation half of the held-out points and the chosen T_i rerun (same noise) on the test half; all under
    ctx.folder/prefix."""
    validation, data = ctx.subfolder(f"{prefix}validation"), ctx.subfolder(f"{prefix}data")
    write_task(_halved(task, validation=True), validation)
    write_task(_halved(task, validation=False), data)
    reports: dict[float, Mapping[str, object]] = {}
    tuning: dict[float, dict[int, float]] = {}
    runs: list[Path] = []
    top = max(budgets)
    for budget, warm_start in (*((budget, False) for budget in budgets), (top, True)):
        name = f"{prefix}eps{budget:g}" + ("-warm-start" if warm_start else "")
        accuracies = {
            updates: float(audited_run(ctx.folder / f"{name}-T{updates}-validation",
                                       _topology(task, budget, updates, warm_start=warm_start),
                                       noise_seed=noise[budget], data=validation).report["utility"]["private"])
            for updates in grid}
        # the warm-started run's audit replays every propagation step from released models (the private logs'
        # transcript check): what makes the propagation post-processing, charged nothing
        report = audited_run(ctx.folder / name, _topology(task, budget, _best(accuracies), warm_start=warm_start),
                             noise_seed=noise[budget], data=data, with_private_logs=warm_start).report
        runs += [Path(f"{name}{suffix}") / part
                 for suffix in ("", *(f"-T{updates}-validation" for updates in grid)) for part in ("run", "audit")]
        if warm_start:
            warm, warm_tuning = report, accuracies
        else:
            reports[budget], tuning[budget] = report, accuracies
    return Curve(reports, tuning, warm, warm_tuning, runs, data)


def _wide_rows(dimension: int, top: float, curve: Curve, scale: float, n: int) -> list[Row]:
    """The paper's p (Fig. 2(a,b), Fig. 3): private CD with T_i tuned against the purely local models, the T_i chosen,
    and the paper's warm start at the largest budget."""
    budgets = sorted(curve.reports)
    local = float(curve.reports[budgets[0]]["utility"]["local"])
    accuracy = {budget: float(curve.reports[budget]["utility"]["private"]) for budget in budgets}
    warm = float(curve.warm["utility"]["private"])
    above = [budget for budget in budgets if accuracy[budget] > local]
    rows = [Row(f"p = {dimension}, budget {budget:g}: private CD mean test accuracy (tuned T_i)", None,
                accuracy[budget], "accuracy", note=f"the purely local models: {local:.3f}") for budget in budgets]
    rows += _tuning_rows(curve.tuning, f"p = {dimension}, ")
    rows.append(_warm_start_row(dimension, top, curve, scale))
    evidence = (f"at p = {dimension} private CD with T_i tuned beats the purely local models ({local:.3f}) "
                + (f"from budget {above[0]:g}" if above else "at no budget run")
                + " (accuracy " + " to ".join(f"{accuracy[budget]:.3f} at {budget:g}" for budget in
                                              dict.fromkeys((budgets[0], budgets[-1])))
                + f"), and from the paper's warm start it scores {warm:.3f} at budget {top:g}")
    recipe = (f"recipe: {n} agents of the regenerated task, delta_i = exp(-5), budgets split equally by Thm 1, T_i "
              f"tuned over {', '.join(map(str, sorted(curve.tuning[top])))} on half of every agent's held-out points, "
              f"mu = {PersonalizedDemo.mu:g}, L_0 = {PersonalizedDemo.lipschitz:g}, the warm start at eps "
              f"{WARM_START_EPSILON:g} with {PROPAGATION_STEPS} propagation steps")
    beats = bool(above) and above[0] <= SMALL_BUDGET
    papers = dimension == WIDE_DIMENSION and n == PUBLISHED_AGENTS
    rows.append(Row(f"p = {dimension}: budgets where private CD beats the purely local models (fraction)", None,
                    len(above) / len(budgets), "fraction",
                    note=f"§5.1 and Fig. 2(c): above the local models even at budget {SMALL_BUDGET:g}",
                    verdict=Verdict(REPRODUCED, f"{evidence}.") if beats else
                    Verdict(FINDING, f"{evidence}: in the paper's setting (p = {dimension}, n = {n}) private CD does "
                                     f"not beat the purely local models at budget {SMALL_BUDGET:g}; {recipe}.")
                    if papers else
                    Verdict(DIFFERS, f"{evidence}, with {n} agents" + (f" and p = {dimension}" if dimension !=
                                     WIDE_DIMENSION else "") + " (quick scale, stated).")))
    return rows


def _topology(task: PersonalizedTask, budget: float | None, updates: int, *, warm_start: bool = False) -> Topology:
    """The demo's private CD (non-private when `budget` is None) on `task` with T_i = `updates`, from the paper's
    warm start when `warm_start`."""
    params: PersonalizedCDParams = PersonalizedDemo().params(argparse.Namespace(
        sensitivity=None, dimension=task.info.dimension, epsilon=budget, alpha=2.0)).model_copy(
        update={"tick_rate": TICK_RATE, "updates": updates})
    if budget is None:
        params = params.model_copy(update={"epsilon": None, "delta": 0.0})
    elif warm_start:  # validated again: the warm start must leave part of the budget to the updates
        params = PersonalizedCDParams.model_validate(params.model_dump() | {
            "warm_start_epsilon": WARM_START_EPSILON, "warm_start_propagation": PROPAGATION_STEPS})
    name = NON_PRIVATE if budget is None else f"eps{budget:g}-T{updates}" + ("-warm-start" if warm_start else "")
    return task_topology(task, params, run_id=new_run_id(f"reproduce-aistats-{name}"))


def _halved(task: PersonalizedTask, *, validation: bool) -> PersonalizedTask:
    """The task with each agent's held-out points halved: the first half validates T_i, the second half tests."""
    half = task.info.test_per_agent // 2
    part = slice(0, half) if validation else slice(half, None)
    test = [LocalData(points.x[part], points.y[part]) for points in task.test]
    info = task.info.model_copy(update={"test_per_agent": len(test[0].y)})
    return dataclasses.replace(task, info=info, test=test)


def _best(accuracies: Mapping[int, float]) -> int:
    """The T_i of the best validation accuracy (the fewest updates among ties)."""
    return max(accuracies, key=lambda updates: (accuracies[updates], -updates))


def _tuning_rows(tuning: Mapping[float, Mapping[int, float]], prefix: str = "") -> list[Row]:
    """Per budget: the T_i chosen on the validation split, with every T_i's validation accuracy in the note."""
    return [Row(f"{prefix}budget {budget:g}: T_i chosen on the validation split", None, float(_best(accuracies)),
                "updates", note="validation accuracy by T_i: " + ", ".join(f"{updates}: {accuracy:.3f}"
                                                                          for updates, accuracy in accuracies.items()))
            for budget, accuracies in tuning.items()]


def _deviations(n: int, grid: Sequence[int], wide: int, wide_budgets: Sequence[float]) -> list[Deviation]:
    return [
        Deviation("dataset", "synthetic linear classification, p = 100 in Fig. 2(a,b) and Fig. 3, several p in "
                  "Fig. 2(c)", f"the same task regenerated with p = {DIMENSION} (the main curve), and with p = {wide} "
                  f"at budget{'s' * (len(wide_budgets) > 1)} {', '.join(f'{b:g}' for b in wide_budgets)}",
                  "the personalized-cd demo's task, and the paper's p"
                  + ("" if len(wide_budgets) > 1 else " (quick scale: its largest budget only, for time)")
                  + ("" if wide == WIDE_DIMENSION else f" (quick scale: p = {wide} for time)")),
        Deviation("n", f"{PUBLISHED_AGENTS} agents", f"{n} agents",
                  "" if n == PUBLISHED_AGENTS else "quick scale: minutes"),
        Deviation("rounds", "T_i tuned per budget (on a validation split; the grid not printed)",
                  f"T_i tuned per budget (and for the warm-started run) over {', '.join(map(str, grid))} on half of "
                  "every agent's held-out points, scored on the other half; non-private CD at T_i = "
                  f"{PersonalizedDemo.updates}", "the paper's recipe, on netdp's held-out points"),
        Deviation("warm start", f"private warm start at eps {WARM_START_EPSILON:g}, smoothed by model propagation "
                  "(supplementary C), at every budget of Fig. 2(c); how it perturbs the local model and how many "
                  "propagation steps: not given",
                  "the curves (and non-private CD) start from zero, without warm start; at each p one more run at "
                  f"the largest budget, its T_i tuned the same way, starts from the local model with Laplace noise "
                  f"(output perturbation) at eps {WARM_START_EPSILON:g}, paid from the budget, then "
                  f"{PROPAGATION_STEPS} wake-ups of model propagation (16) per agent with the run's mu, the audit "
                  "charging the warm start's release only (propagation is post-processing of released models, "
                  "which its replay recomputes)",
                  f"the warm start's Laplace scale sqrt(p) L_0 / (m_i lambda_i eps) with lambda_i = 1/m_i is "
                  f"{_warm_start_scale(DIMENSION):.3g} per coordinate at p = {DIMENSION} and "
                  f"{_warm_start_scale(wide):.3g} at p = {wide}, many times the models' own scale: runs from it "
                  "stay near chance, so the curves are compared from zero and the extra rows measure the warm "
                  "start; the step count is netdp's choice"),
        Deviation("clipping", "L_0 not given for Fig. 2", f"l1 clip L_0 = {PersonalizedDemo.lipschitz:g}, "
                  f"mu = {PersonalizedDemo.mu:g}", "the personalized-cd demo's values"),
        Deviation("seeds", "5 runs averaged (Fig. 2's caption)", "one run per budget and p", "shape only"),
    ]


def _warm_start_scale(dimension: int) -> float:
    """The warm start's Laplace scale per coordinate with lambda_i = 1/m_i: sqrt(p) (1 + tol) L_0 / eps_ws."""
    return math.sqrt(dimension) * (1.0 + LOCAL_MODEL_TOLERANCE) * PersonalizedDemo.lipschitz / WARM_START_EPSILON


def _local_model_scale(task: PersonalizedTask) -> float:
    """The purely local models' mean absolute coordinate: the scale the warm start's noise is set against."""
    topology = _topology(task, None, PersonalizedDemo.updates)
    return float(np.mean([np.abs(AgentProblem.of(topology.protocol, topology, agent, data).local_model()).mean()
                          for agent, data in enumerate(task.train)]))


def _warm_start_row(dimension: int, budget: float, curve: Curve, scale: float) -> Row:
    """The paper's warm start at the largest budget, T_i tuned, against the same budget's run from zero and the local
    models; with what the audit charged for it."""
    accuracy, without = float(curve.warm["utility"]["private"]), float(curve.reports[budget]["utility"]["private"])
    local, noise = float(curve.reports[budget]["utility"]["local"]), _warm_start_scale(dimension)
    replay = next((check for check in curve.warm["checks"] if check["name"] == TRANSCRIPT_CHECK), None)
    charged = max(float(agent["theorem1"]) for agent in curve.warm["personalized"]["agents"] if "budget" in agent)
    audited = (f"the audit charges the warm start's eps {WARM_START_EPSILON:g} and the updates, composing to at most "
               f"{charged:.4g} by Thm 1, and nothing for propagation, whose every step its replay "
               + ("recomputes from released models" if replay is not None and replay["ok"] else
                  "could not recompute (the transcript check did not pass)"))
    figures = (f"at p = {dimension}, from the paper's warm start (eps {WARM_START_EPSILON:g}, then {PROPAGATION_STEPS} "
               f"propagation steps, T_i = {_best(curve.warm_tuning)} chosen on the validation split) private CD scores "
               f"{accuracy:.3f} at budget {budget:g}, against {without:.3f} from zero and {local:.3f} for the purely "
               f"local models; {audited}")
    prefix = "" if dimension == DIMENSION else f"p = {dimension}, "
    return Row(f"{prefix}budget {budget:g}, the paper's warm start (eps {WARM_START_EPSILON:g}, {PROPAGATION_STEPS} "
               "propagation steps): private CD mean test accuracy", None, accuracy, "accuracy",
               note="supplementary C: the warm start helps private CD; one more run at the largest budget, its T_i "
                    "tuned on the validation split as the curve's",
               verdict=Verdict(REPRODUCED, f"{figures}.") if accuracy >= without else
               Verdict(FINDING, f"{figures}. The warm start's Laplace scale per coordinate, sqrt(p) L_0 / (m_i "
                                f"lambda_i eps) = {noise:.3g} with lambda_i = 1/m_i, is {noise / scale:.0f} times the "
                                f"local models' mean |coordinate| ({scale:.3g}); model propagation averages "
                                "neighbours' models that carry noise of the same scale, which shrinks it by the square "
                                "root of the number averaged at best, not to the model's scale, and the updates do "
                                "not wash it out."))


def _middle_term(budget: float) -> list[StatementVsProof]:
    """Thm 1's printed middle term against Kairouz et al.'s, at the demo's T_i and at MANY_UPDATES updates."""
    cases = []
    for updates in (PersonalizedDemo.updates, MANY_UPDATES):
        split = [equal_split(budget, PUBLISHED_DELTA, updates)] * updates
        cases.append(StatementVsProof(
            f"AISTATS 2018 Thm 1, middle term ({updates} equal updates of eps {split[0]:.4g}, budget {budget:g})",
            "main text: log(e + sqrt(sum eps^2 / delta))", printed_theorem1(split, PUBLISHED_DELTA),
            "Kairouz et al. Thm 3.5, which the proof cites: log(e + sqrt(sum eps^2) / delta)",
            theorem1_epsilon(split, PUBLISHED_DELTA), "Kairouz et al. (the larger, safe one)",
            "the printed reading undercounts the composition it cites; netdp splits every budget by Kairouz's form "
            "(with few updates the plain sum is the smallest bound and both agree)"))
    return cases


def _rows(private: Mapping[float, Mapping[str, object]], non_private: Mapping[str, object], n: int) -> list[Row]:
    budgets = sorted(private)
    local = float(private[budgets[0]]["utility"]["local"])
    accuracy = {budget: float(private[budget]["utility"]["private"]) for budget in budgets}
    rows = [Row("agents", PUBLISHED_AGENTS, float(n), "agents", 0.0,
                "§5.1: n = 100 (the quick scale runs fewer)",
                verdict=Verdict(REPRODUCED, f"{n} agents as in §5.1.") if n == PUBLISHED_AGENTS else
                Verdict(DIFFERS, f"{n} agents against the paper's {PUBLISHED_AGENTS} (quick scale).")),
            Row("delta of every agent's budget", PUBLISHED_DELTA, float(private[budgets[0]]["personalized"]["agents"][0]
                                                                        ["budget"]["delta"]),
                "delta", 1e-12, "§5.1: Thm 1 with delta_i = exp(-5)"),
            Row("purely local models: mean test accuracy", None, local, "accuracy",
                note="Fig. 2(c)'s perfectly private baseline, every agent's own minimiser"),
            Row("non-private CD: mean test accuracy (netdp run)", None, float(non_private["utility"]["run"]),
                "accuracy", note="the same updates without noise: Fig. 2's ceiling")]
    for budget in budgets:
        agents = [agent for agent in private[budget]["personalized"]["agents"] if "budget" in agent]
        rows += [
            Row(f"budget {budget:g}: private CD mean test accuracy (netdp run)", None, accuracy[budget], "accuracy",
                note="a point of Fig. 2(c)'s curve (the paper's p and data differ: shape only)"),
            Row(f"budget {budget:g}: largest spend by Thm 1 over agents", budget,
                max(float(agent["theorem1"]) for agent in agents), "eps", SPEND_RTOL,
                note="the paper's composition (Thm 1) of every logged release, at delta_i"),
            Row(f"budget {budget:g}: largest spend by the PLD accountant over agents", None,
                max(float(agent["pld"]) for agent in agents), "eps",
                note="netdp's exact composition of the same Laplace releases (below Thm 1's bound)"),
        ]
    rho = rank_trend(budgets, [accuracy[b] for b in budgets])
    gain = accuracy[budgets[0]] - local
    ceiling = float(np.mean([float(non_private["utility"]["run"]) >= accuracy[b] for b in budgets]))
    deviations = f"with p = {DIMENSION} and no warm start (stated deviations)"
    rows += [
        Row("accuracy against budget", None, rho, "Spearman rho",
            note="Fig. 2(c): accuracy rises with the budget (rho = 1)",
            verdict=Verdict(REPRODUCED, f"accuracy rises with the budget (Spearman {rho:.2f}).") if rho > 0.8 else
            Verdict(DIFFERS, f"accuracy does not rise with the budget (Spearman {rho:.2f}) {deviations}.")),
        Row(f"budget {budgets[0]:g}: private CD minus purely local accuracy", None, gain,
            "accuracy", note=f"§5.1: at budget {SMALL_BUDGET:g} private CD is significantly above local (> 0)",
            verdict=Verdict(REPRODUCED, f"private CD is {gain:.3f} above the purely local models at budget "
                                        f"{budgets[0]:g}.") if gain > 0 else
            Verdict(DIFFERS, f"private CD is {gain:.3f} against the purely local models at budget {budgets[0]:g}, "
                             f"{deviations}, T_i tuned.")),
        Row("budgets where non-private CD is at least as accurate as private CD (fraction)", None, ceiling, "fraction",
            note="Fig. 2: private CD stays below its non-private ceiling (1)",
            verdict=Verdict(REPRODUCED if ceiling == 1 else DIFFERS,
                            f"non-private CD is at least as accurate at {ceiling:.0%} of the budgets run.")),
    ]
    return rows


def _accuracy_figure(private: Mapping[float, Mapping[str, object]], non_private: Mapping[str, object],
                     wide: Mapping[int, Curve], narrow: Curve) -> Figure:
    """The audit's accuracy-vs-budget figure of the largest budget's run, with every netdp run's point on it, the
    warm-started runs' points, and the paper's p's curve with its local models."""
    budgets = sorted(private)
    figure = learning_drawers(private[budgets[-1]], {})["budget_accuracy"]()
    axis = figure.axes[0]
    axis.plot(budgets, [float(private[b]["utility"]["private"]) for b in budgets], "s-", color="tab:purple",
              label="private CD, netdp runs (one per budget, T_i tuned)")
    warm_label = f"the paper's warm start (eps {WARM_START_EPSILON:g}, {PROPAGATION_STEPS} propagation steps)"
    axis.plot([budgets[-1]], [float(narrow.warm["utility"]["private"])], "X", color="tab:red", markersize=9,
              label=f"private CD from {warm_label}")
    for dimension, curve in wide.items():
        axis.plot(sorted(curve.reports), [float(curve.reports[b]["utility"]["private"]) for b in sorted(curve.reports)],
                  "d--", color="tab:brown", label=f"private CD at p = {dimension} (T_i tuned)")
        axis.plot([budgets[-1]], [float(curve.warm["utility"]["private"])], "P", color="tab:brown", markersize=9,
                  label=f"private CD at p = {dimension} from {warm_label}")
        axis.axhline(float(curve.reports[budgets[-1]]["utility"]["local"]), color="tab:brown", linestyle=":",
                     label=f"purely local models at p = {dimension}")
    axis.axhline(float(non_private["utility"]["run"]), color="black", linestyle="-.",
                 label="non-private CD, netdp run")
    axis.legend(fontsize=8)
    axis.set_title("AISTATS 2018 Fig. 2(c): mean test accuracy against the budget (synthetic task, p = "
                   f"{DIMENSION}" + "".join(f" and {dimension}" for dimension in wide) + ")", fontsize=10)
    return figure


def _spend_figure(private: Mapping[float, Mapping[str, object]]) -> Figure:
    """Each budget against the largest spend over agents, by Thm 1 (the paper's bound) and by the PLD accountant."""
    budgets = sorted(private)
    figure = Figure(figsize=(6.5, 4.5))
    axis = figure.subplots()
    for key, label, style in (("theorem1", "Thm 1 (the paper's composition)", "o-"),
                              ("pld", "PLD accountant (netdp's exact)", "s--")):
        spent = [max(float(a[key]) for a in private[b]["personalized"]["agents"] if "budget" in a) for b in budgets]
        axis.plot(budgets, spent, style, label=label)
    axis.plot(budgets, budgets, color="tab:gray", linewidth=0.8, label="the budget")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("budget epsilon of every agent")
    axis.set_ylabel(f"largest spend over agents at delta = {PUBLISHED_DELTA:.3g}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    return figure


def _summary(private: Mapping[float, Mapping[str, object]], non_private: Mapping[str, object], dimension: int,
             wide: Curve) -> str:
    budgets: Sequence[float] = sorted(private)
    accuracy = [float(private[b]["utility"]["private"]) for b in budgets]
    local = float(private[budgets[0]]["utility"]["local"])
    rising = rank_trend(budgets, accuracy) > 0.8
    wide_budgets = sorted(wide.reports)
    wide_accuracy = [float(wide.reports[b]["utility"]["private"]) for b in wide_budgets]
    wide_local = float(wide.reports[wide_budgets[0]]["utility"]["local"])
    return (f"Fig. 2's rising curve {'holds' if rising else 'does not hold'} on netdp's runs at p = {DIMENSION} "
            f"(accuracy {accuracy[0]:.3f} at budget {budgets[0]:g} to {accuracy[-1]:.3f} at {budgets[-1]:g}, "
            f"non-private CD {float(non_private['utility']['run']):.3f}), and private CD beats the purely local models "
            f"({local:.3f}) {_beats(budgets, accuracy, local)}; at p = {dimension} it scores "
            + " and ".join(f"{a:.3f} at budget {b:g}" for b, a in zip(wide_budgets, wide_accuracy, strict=True))
            + f" against local models at {wide_local:.3f}, beating them "
            f"{_beats(wide_budgets, wide_accuracy, wide_local)}, and {float(wide.warm['utility']['private']):.3f} "
            f"from the paper's warm start at budget {budgets[-1]:g}; the paper has private CD above the local models "
            f"from budget {SMALL_BUDGET:g}.")


def _beats(budgets: Sequence[float], accuracy: Sequence[float], local: float) -> str:
    above = [b for b, a in zip(budgets, accuracy, strict=True) if a > local]
    return ("at every budget run" if above == list(budgets) else f"from budget {above[0]:g} on" if above
            else "at no budget run")


REPRODUCTION = Reproduction(
    name="aistats2018-fig2",
    paper="Personalized and Private Peer-to-Peer Machine Learning (AISTATS 2018)",
    figure="Fig. 2 (c)",
    claim="private CD's accuracy rises with the budget, above purely local models even at budget 0.15 and below "
          "non-private CD",
    run=run,
    full_scale=f"n = {PUBLISHED_AGENTS} agents of the regenerated synthetic task (p = {DIMENSION}), private CD at "
               f"budgets {', '.join(f'{b:g}' for b in FULL_BUDGETS)} and non-private CD, each one virtual run, "
               f"audited, with T_i tuned per budget over {', '.join(map(str, FULL_UPDATES))} on a validation split "
               f"(about 40 minutes), and the same at p = {WIDE_DIMENSION} (as long again); at each p one more run at "
               f"budget {max(FULL_BUDGETS):g} from the paper's warm start, T_i tuned the same way",
    quick_scale=f"n = {QUICK_AGENTS} agents, budgets {', '.join(f'{b:g}' for b in QUICK_BUDGETS)} with T_i tuned over "
                f"{', '.join(map(str, QUICK_UPDATES))} at p = {DIMENSION}, and at budget {max(QUICK_BUDGETS):g} at p "
                f"= {QUICK_WIDE_DIMENSION}; at each p one run at budget {max(QUICK_BUDGETS):g} from the paper's warm "
                "start (T_i tuned the same way), and non-private CD",
)
