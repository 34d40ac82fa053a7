"""The report's findings in one sentence each, so that the page and the console say the same thing.

Each function reads the report document (a fresh one or one loaded from report.json) and
returns plain text, or None when the report has nothing to say on that point.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator_tools.audit.report import format_number

# Top-level keys only a learning protocol's report has (Muffliato-GD, rw-sgd, personalized CD).
LEARNING_KEYS = ("learning", "rw_sgd", "personalized")
NO_NOISE = "σ = 0: no privacy"
NO_LEARNING_DATA = "not computed: pass --data (the run's data folder) to measure the test metric"


def reconstructed_sentence(report: Mapping[str, object]) -> str | None:
    """What a reconstructed pair is, with their count (None when there is none)."""
    count = report["summary"]["reconstructable_pairs"]
    if not count:
        return None
    return (f"{count} of {report['pairs_file']['rows']} pairs are reconstructed: the observer's received "
            "combinations determine the source's noisy input x_u + η_u, so that pair's loss is exactly local DP.")


def empirical_sentence(report: Mapping[str, object]) -> str | None:
    """The real run's canary bound, or the reason there is none; beside it the model attack, named as a self-check."""
    summary = report["summary"]
    canaries = report.get("canaries")
    if "replay" not in report:  # a plan: no run to test
        text = ""
    elif canaries is None:
        text = ("Empirical: this run planted no canaries, so nothing here tests the real run's noise and messages "
                "(audit a run made with `netdp run --canaries M`).")
    elif summary["canary_pairs"] == 0:
        text = f"Empirical: not computed ({canaries['reason']})."
    else:
        found = summary["pair_columns"].get("empirical_eps_lower", {}).get("max")
        text = (f"Empirical lower bound from the run's own {canaries['canaries']} canaries per node, scored from each "
                f"observer's logged view (every bound holding together at 95% confidence): largest ε "
                f"{format_number(found)} over {summary['canary_pairs']} pairs; {canaries['canaries']} canaries can "
                f"certify at most ε = {format_number(canaries['limit_eps'])} at δ = {report['delta']:g}.")
    attacked = summary["attacked_pairs"]
    if not attacked:
        return text or None
    found = summary["pair_columns"].get("model_attack_eps_lower", {}).get("max")
    text += (f"{' ' if text else ''}Model attack (a self-check of the arithmetic on the audit's own model, "
             f"not a test of the run): largest ε {format_number(found)} over {attacked} pairs")
    limit = summary.get("model_attack_limit")
    if limit is None:
        return text + "."
    return (text + f" (at most ε = {format_number(limit['eps'])} with {limit['replays']} replays per hypothesis).")


def utility_sentence(report: Mapping[str, object]) -> str | None:
    """The run's utility in one sentence: averaging MSE against its bounds, or a learning run's final metric."""
    utility = report.get("utility")
    if utility is None:
        learning = any(key in report for key in LEARNING_KEYS)
        stripped = (report.get("payloads") or {}).get("stripped", False)  # no --data to ask for: see payloads_sentence
        return f"Utility: {NO_LEARNING_DATA}." if learning and "replay" in report and not stripped else None
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
    if rule is not None and utility["rounds"] is not None:
        rule += f"; here T = {utility['rounds']} rounds" + (
            "" if utility["t_stop"] is None else f", T_stop = {utility['t_stop']}")
    central = (f"the mean of everyone's noisy inputs (central DP, or local DP's releases averaged) "
               f"{format_number(utility['central'])} (expected)")
    bound = central if rule is None else f"Muffliato's bound {format_number(utility['bound'])} ({rule}), {central}"
    if utility["mse"] is None:
        return f"Utility: the MSE cannot be computed ({utility['reason']}); at this σ, {bound}, per coordinate."
    return (f"Utility: MSE of the final estimates against the mean of the clipped inputs (from the "
            f"{utility['truth']}): {format_number(utility['mse'])} per coordinate over {utility['nodes_scored']} "
            f"nodes, against {bound} and every node alone, keeping its own noisy input, "
            f"{format_number(utility['local'])} (expected).")


def payloads_sentence(report: Mapping[str, object]) -> str | None:
    """What an audit of structure-only logs did not compute (None for an audit of full logs)."""
    block = report.get("payloads")
    if not block or not block["stripped"]:
        return None
    parts = "; ".join(f"the {item['name']} {item['kind']}" if item["kind"] != "check" else
                      f"the check '{item['name']}'" for item in block["not_computed"])
    return (f"Structure-only audit: {block['reason']}. The exact, paper, LDP and central columns are computed as "
            f"from full logs; not computed: {parts}.")


def paper_statement_sentence(report: Mapping[str, object]) -> str | None:
    """Where the paper theorem's statement and its proof disagree (ring-histogram), the proof's value beside the
    statement's and why the column is the proof's (None elsewhere)."""
    paper = _token_walk(report).get("paper") or {}
    stated = paper.get("stated")
    if stated is None:
        return None
    split = paper["split"]
    return (f"Paper column: {paper['theorem']}, ε' = {format_number(paper['eps'])} at δ = {report['delta']:g} (each "
            f"window {format_number(split['window_eps'])} by Erlingsson et al.'s Cor. 9); the theorem as stated gives "
            f"{format_number(stated['eps'])} at the same split. {stated['why_not_used']}.")


def not_computed_sentence(report: Mapping[str, object]) -> str | None:
    """How many pairs' exact loss an enumeration refused up front, and why (None when every pair was computed)."""
    refused = _token_walk(report).get("exact_not_computed") or {}
    if not refused.get("count"):
        return None
    return (f"Exact loss not computed for {refused['count']} of {refused['of']} pairs: each pair's enumeration, "
            f"estimated before it started, would visit at least {format_number(refused['smallest_size'])} count "
            f"vectors, over the limit of {format_number(refused['limit'])}; their exact values are null (not 0), "
            "and the local-DP column still bounds them.")


def _token_walk(report: Mapping[str, object]) -> Mapping[str, object]:
    """A token walk's own block: `token_walk` in an audit, `plan` in a plan (empty for other protocols)."""
    return report.get("token_walk") or report.get("plan") or {}


def summary_sentences(report: Mapping[str, object]) -> list[str]:
    """What the report shows, a sentence each, in the order the page and the console give them."""
    sentences = [payloads_sentence(report), reconstructed_sentence(report),
                 (report.get("combinations") or {}).get("sentence"), empirical_sentence(report),
                 utility_sentence(report), paper_statement_sentence(report), not_computed_sentence(report)]
    return [sentence for sentence in sentences if sentence]
