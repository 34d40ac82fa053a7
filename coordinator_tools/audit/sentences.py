"""The report's findings in one sentence each, so that the page and the console say the same thing.

Each function reads the report document (a fresh one or one loaded from report.json) and
returns plain text, or None when the report has nothing to say on that point.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator_tools.audit.report import format_number

# Top-level keys only a learning protocol's report has (Muffliato-GD, rw-sgd, personalized CD).
LEARNING_KEYS = ("learning", "rw_sgd", "personalized")
NO_LEARNING_DATA = "not computed: pass --data (the run's data folder) to measure the test metric"


def reconstructed_sentence(report: Mapping[str, object]) -> str | None:
    """What a reconstructed pair is, with their count (None when there is none)."""
    count = report["summary"]["reconstructable_pairs"]
    if not count:
        return None
    return (f"{count} of {report['pairs_file']['rows']} pairs are reconstructed: the observer's received "
            "combinations determine the source's noisy input x_u + η_u, so that pair's loss is exactly local DP.")


def empirical_sentence(report: Mapping[str, object]) -> str | None:
    """The attack's largest certified ε beside the largest any attack of its size could certify (None: no attack)."""
    summary = report["summary"]
    attacked = summary["attacked_pairs"]
    if not attacked:
        return None
    found = summary["pair_columns"].get("empirical_eps_lower", {}).get("max")
    text = (f"Empirical lower bound (attack, every bound holding together at 95% confidence): largest ε {format_number(found)} over {attacked} "
            "attacked pairs")
    limit = summary.get("empirical_limit")
    if limit is None:
        return text + "."
    return (text + f" (this attack can certify at most ε = {format_number(limit['eps'])} with {limit['replays']} "
            f"replays per hypothesis, at δ = {report['delta']:g}: a larger loss reads as that limit).")


def utility_sentence(report: Mapping[str, object]) -> str | None:
    """The run's utility in one sentence: averaging MSE against its bounds, or a learning run's final metric."""
    utility = report.get("utility")
    if utility is None:
        learning = any(key in report for key in LEARNING_KEYS)
        return f"Utility: {NO_LEARNING_DATA}." if learning and "replay" in report else None
    if utility.get("per") == "coordinate":
        return _averaging(utility)
    metric = utility["metric"]
    if "budget_curve" in utility:
        return (f"Utility: mean test {metric} of private CD (this run) {format_number(utility['private'])}, purely "
                f"local models {format_number(utility['local'])}, non-private CD "
                f"{format_number(utility['non_private'])}.")
    final = next((value for value in reversed(utility["netdp"]) if value is not None), None)
    return (f"Utility: test {metric} after step {utility['steps'][-1]}: netdp {format_number(final)}, central "
            f"{format_number(utility['central'][-1])}, local DP {format_number(utility['local'][-1])} (the starting "
            f"model scores {format_number(utility['initial'])}).")


def _averaging(utility: Mapping[str, object]) -> str:
    rule = utility["bound_rule"]
    if utility["rounds"] is not None:
        rule += f"; here T = {utility['rounds']} rounds" + (
            "" if utility["t_stop"] is None else f", T_stop = {utility['t_stop']}")
    bound = (f"Muffliato's bound {format_number(utility['bound'])} ({rule}), the mean of everyone's noisy inputs "
             f"(central DP, or local DP's releases averaged) {format_number(utility['central'])} (expected)")
    if utility["mse"] is None:
        return f"Utility: the MSE cannot be computed ({utility['reason']}); at this σ, {bound}, per coordinate."
    return (f"Utility: MSE of the final estimates against the mean of the clipped inputs (from the "
            f"{utility['truth']}): {format_number(utility['mse'])} per coordinate over {utility['nodes_scored']} "
            f"nodes, against {bound} and every node alone, keeping its own noisy input, {format_number(utility['local'])} "
            "(expected).")
