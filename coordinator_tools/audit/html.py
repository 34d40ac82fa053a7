"""One static page (index.html) that bundles an audit: headline, checks, summary, threat model, figures.

The page leads with its answer: the mean exact ε against local DP's at the same noise, ε by hop
distance, and the loss-by-hop figure that carries them; the run's metadata and the checks follow.
Plain HTML with inline CSS and relative links, so the output folder can be zipped, mailed or
served as is. Everything shown comes from the report document, checked against the report's model (`AuditReport`)
and read through its attributes (a protocol's own blocks are read as the protocol wrote them), and from its pairs
file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path

import numpy as np

from coordinator_tools.audit.checks import UNDERCOUNT_CHECK
from coordinator_tools.audit.faults import stopped_sentence
from coordinator_tools.audit.learning_figures import side_label
from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.report import MEAN_RULE, REPORT_FILE, format_number, worst_observers
from coordinator_tools.audit.report_schema import AuditReport, CheckResult, PairsFile, Summary
from coordinator_tools.audit.sentences import NO_NOISE, summary_sentences
from node.idset import format_ids

PAGE_FILE = "index.html"
HEADLINE_FIGURE = "loss_vs_hops"  # the figure that carries the headline, shown beside it
# The closed forms whose undercount the summary states (`summary.<variant>_undercounts`), as the page names them.
UNDERCOUNT_NAMES = {"paper": "the paper's closed-form bound", "paper_corrected": "the corrected closed form"}
SHOWN_OBSERVERS = 20
SHOWN_FINDINGS = 50
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
.ok { color: #176b1c; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.warning { color: #8a5300; font-weight: bold; } tr.warning td { background: #fff4d6; }
.banner { background: #fff4d6; border: 1px solid #e0b84a; padding: 0.6em 1em; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""
FIGURE_CAPTIONS = {
    "loss_vs_hops": "Loss against hop distance: the mean over the pairs u ≠ v at that distance (divided by their "
                    "count) with min-max bars, against the baselines.",
    "pair_heatmap": "Exact loss of every pair (source u by observer v); the diagonal is the node itself (own), "
                    "not a pair.",
    "node_means": f"Each observer's mean loss {MEAN_RULE}, against the baselines.",
    "loss_by_observer": "Each observer's loss against its hop distance to the source (thin line per observer: "
                        "the mean over the sources at that distance; thick: the mean over observers). On a graph "
                        "where every node looks alike (a hypercube, a ring) the lines coincide, and the decay with "
                        "distance is what tells observers' views apart.",
    "utility": "Test metric over steps: netdp against a trusted aggregator with the same noise (central) and "
               "local DP (like Muffliato Fig. 1c).",
    "schedule_spread": "Pairwise exact epsilon of the run's schedule (realized) against the other schedule, "
                       "planned ex ante on the same nodes, steps and noise (like Muffliato Fig. 1b).",
    "communicability": "A random walk's pairwise loss (Thm 3 where the order is valid, else ex ante over "
                       "simulated walks) beside the graph's communicability expm(A), log scales (like ICML 2024 "
                       "Fig. 3).",
    "budget_accuracy": "Personalized learning: mean test accuracy (or per-user RMSE) of private CD against every "
                       "agent's budget, beside purely local models and non-private CD (like AISTATS 2018 Fig. 2).",
}


def write_html(report: Mapping[str, object], out_dir: Path, figures: Mapping[str, Path],
               report_dir: Path | None = None) -> Path:
    """Write out_dir/index.html; figures are linked relative to out_dir. `report_dir`: where the report and its
    pairs file were written, when not out_dir."""
    out_dir = Path(out_dir)
    model = AuditReport.model_validate(report)
    run_id = escape(model.run.run_id)
    sections = [
        f"<h1>Privacy audit of run {run_id}</h1>",
        _sampler_banner(model.summary),
        _headline(report, Path(report_dir or out_dir)),
        *(_figure(name, path, out_dir) for name, path in figures.items() if name == HEADLINE_FIGURE),
        "<h2>Run</h2>",
        _run_table(model, report),
        "<h2>Checks</h2>",
        _checks_table(model.checks, model.summary),
        _replay_section(model),
        "<h2>Summary</h2>",
        _summary_table(model, report),
        _columns_section(report),
        _faults_section(report),
        _collusion_section(report),
        _learning_section(report),
        _personalized_section(report),
        "<h2>Figures</h2>",
        *(_figure(name, path, out_dir) for name, path in figures.items() if name != HEADLINE_FIGURE),
        "<h2>Threat model</h2>",
        _key_value_table(model.threat_model),
        "<h2>Data</h2>",
        _data_links(model.pairs_file),
    ]
    page = (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>netdp audit "
            f"{run_id}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(section for section in sections if section) + "\n</body></html>\n")
    path = out_dir / PAGE_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _headline(report: Mapping[str, object], report_dir: Path) -> str:
    """The answer first: the mean exact ε over the pairs against local DP's at the same noise, the worst
    observer's mean, and ε by hop distance (read from the pairs file)."""
    if report["sigma"] == 0:
        return f"<p><b>{escape(NO_NOISE)}</b>: every loss is infinite.</p>"
    wanted = ("hop_distance", "exact_eps_upper", "ldp_eps")
    if not set(wanted) <= set(report["pairs_file"]["columns"]):
        return ""
    pairs = read_pairs(report_dir / str(report["pairs_file"]["file"]), wanted)
    hops, eps, ldp = pairs["hop_distance"], pairs["exact_eps_upper"], pairs["ldp_eps"]
    known = ~np.isnan(eps)
    if not known.any():
        return ""
    mean, ldp_mean = float(np.mean(eps[known])), float(np.mean(ldp[known]))
    observers = [x for x in report["summary"]["mean_eps_per_observer"]["exact_upper"] if isinstance(x, float)]
    worst = (f"; the worst observer's mean {escape(MEAN_RULE)}: {format_number(max(observers))}" if observers
             else "")
    lead = (f"<p><b>Mean exact ε at δ = {report['delta']:g} over {int(known.sum())} pairs: {format_number(mean)}, "
            f"against local DP's {format_number(ldp_mean)} at the same noise ({_ratio(mean, ldp_mean)} of it)"
            f"{worst}.</b></p>")
    rows = []
    for distance in np.unique(hops[np.isfinite(hops)]):
        at = (hops == distance) & known
        if at.any():
            at_eps, at_ldp = eps[at], float(np.mean(ldp[at]))
            rows.append((f"{distance:g}", str(int(at.sum())), _number(float(np.mean(at_eps))),
                         _number(float(np.max(at_eps))), _ratio(float(np.mean(at_eps)), at_ldp)))
    return "\n".join(["<h2>Headline</h2>", lead, "<p>Exact ε by hop distance between source and observer:</p>",
                      _table(("hops", "pairs", "mean exact ε", "max", "mean / local DP"), rows)])


def _ratio(value: float, of: float) -> str:
    """value / of for people: '0.42x', or '-' where it means nothing (no baseline, infinite loss)."""
    if not (np.isfinite(value) and np.isfinite(of)) or of <= 0:
        return "-"
    return f"{value / of:.2f}x"


def _data_links(pointer: PairsFile) -> str:
    """Links to the pairs file (and its CSV export, when written) and the report document."""
    links = [f'<a href="{escape(pointer.file)}">{escape(pointer.file)}</a> (Parquet)']
    if pointer.csv is not None:
        links.append(f'<a href="{escape(pointer.csv)}">{escape(pointer.csv)}</a> (CSV)')
    return (f"<p>{' and '.join(links)}: one row per ordered pair ({pointer.rows} rows); "
            f'<a href="{REPORT_FILE}">{REPORT_FILE}</a>: summaries, checks and the run (schema in SCHEMA.md).</p>')


def _sampler_banner(summary: Summary) -> str:
    sampler = summary.sampler
    if sampler is None:
        return '<p class="banner">A plan: no node has run; the numbers are for the planned schedule.</p>'
    if sampler.simulation:
        return f'<p class="banner"><b>Simulation sampler:</b> {escape(str(sampler.note))}.</p>'
    return ""


def _run_table(model: AuditReport, report: Mapping[str, object]) -> str:
    run = model.run
    rows = {
        "protocol": model.protocol,
        "graph": run.graph,
        "nodes": run.n,
        **_schedule_rows(report),
        "noise sigma, sensitivity": f"{model.sigma:g}, {model.sensitivity:g}",
        "Renyi order alpha, delta": f"{model.alpha:g}, {model.delta:g}",
        "exact method": model.summary.exact_method,
        "topology digest": run.topology_digest,
    }
    return _key_value_table(rows)


def _schedule_rows(report: Mapping[str, object]) -> dict[str, object]:
    """The schedule in a line or two: rounds and messages (synchronous), exchanges (randomized) or token hops."""
    run = report["run"]
    if "rounds" in run:
        return {"rounds (accelerated)" if run["accelerated"] else "rounds": run["rounds"],
                "messages used / planned": f"{run['messages_used']} / {run['messages_planned']}"}
    if "schedules" in run:
        return {"simulated schedules (ex ante)": run["schedules"], "mean exchanges": f"{run['mean_exchanges']:g}"}
    if "walks" in run:
        return {"simulated walks (ex ante)": run["walks"], "contributions": run["contributions_planned"]}
    if "updates" in run:
        made = run["updates"]
        return {"updates per agent, made (planned)": f"{min(made)}-{max(made)} ({run['updates_planned']})",
                "private": "yes" if run["private"] else "no: non-private CD"}
    if "contributions" in run:
        return {"contributions made / planned (noisy)":
                f"{run['contributions']} / {run['contributions_planned']} ({run['noisy_contributions']})",
                "visits per node": ", ".join(map(str, run["visits"]))}
    exchanges = report.get("exchanges", {})
    return {
        "exchanges committed / half-applied / declined / aborted": " / ".join(
            str(run["exchanges"][status]) for status in ("committed", "half_applied", "declined", "aborted")),
        "half-applied exchanges": ", ".join(exchanges.get("half_applied", [])) or "none",
        "aborted exchanges": ", ".join(exchanges.get("aborted", [])) or "none",
    }


def _checks_table(checks: Sequence[CheckResult], summary: Summary) -> str:
    """One row per check: pass (green), FAIL (red) or ⚠ warning (amber: it holds, but read the detail); a warning
    is named for what it found."""
    marks = {"pass": ("ok", "pass"), "fail": ("fail", "FAIL"), "warning": ("warning", "⚠ warning")}
    rows = []
    for check in checks:
        css, mark = marks[check.level]
        rows.append((f'<span class="{css}">{mark}</span>', _check_name(check, summary), escape(check.detail)))
    if not rows:
        return "<p>No checks were run.</p>"
    head = "<tr>" + "".join(f"<th>{column}</th>" for column in ("", "check", "detail")) + "</tr>"
    body = "".join(f'<tr class="{marks[check.level][0]}">' + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for check, row in zip(checks, rows))
    return f"<table>{head}{body}</table>"


def _check_name(check: CheckResult, summary: Summary) -> str:
    """A check's name; the paper-bound warning says what it found ("the paper's bound undercounts N pairs"), its
    name kept beside for a reader of report.json."""
    name = escape(check.name)
    undercounts = summary.paper_undercounts
    if check.name != UNDERCOUNT_CHECK or check.level != "warning" or undercounts is None or not undercounts.count:
        return name
    count = undercounts.count
    found = escape(f"the paper's bound undercounts {count} pair{'s' if count > 1 else ''}")
    return f"{found} <small>({name})</small>"


def _replay_section(model: AuditReport) -> str:
    """What the replay noticed about the logs (audits only; a plan has no logs)."""
    if model.replay is None:
        return ""
    findings = [*model.replay.node_problems, *model.replay.consistency]
    if not findings:
        return "<h2>Logs</h2>\n<p>Every view log is intact and agrees with the others.</p>"
    rows = [(escape(f.severity), escape(f.kind), escape(str(f.node)), escape(f.detail))
            for f in findings[:SHOWN_FINDINGS]]
    more = len(findings) - len(rows)
    note = f"<p>{more} more findings in {REPORT_FILE}.</p>" if more else ""
    return f"<h2>Logs</h2>\n{_table(('severity', 'kind', 'node', 'detail'), rows)}{note}"


def _summary_table(model: AuditReport, report: Mapping[str, object]) -> str:
    """Worst observers first: mean loss per observer in each column, RDP and ε side by side, then the baselines and
    what the run shows in a sentence each."""
    summary = model.summary
    rdp, eps = summary.mean_rdp_per_observer, summary.mean_eps_per_observer
    shown = worst_observers(model, SHOWN_OBSERVERS)
    names = {"exact_upper": "exact (upper end)", "exact_lower": "exact (lower end)", "paper": "paper (closed form)",
             "paper_corrected": "paper (corrected)", "ldp": "local DP"}
    columns = [column for column in names if column in rdp and any(x is not None for x in rdp[column])]
    values = {v: tuple(cell for column in columns for cell in (_number(rdp[column][v]), _number(eps[column][v])))
              for v in shown}
    alike: dict[tuple[str, ...], list[int]] = {}
    for v, cells in values.items():  # observers whose rows are identical share one, in the order first shown
        alike.setdefault(cells, []).append(v)
    rows = [(format_ids(observers), *cells) for cells, observers in alike.items()]
    hidden = len(rdp["exact_upper"]) - len(shown)
    baselines = model.baselines
    headers = ("observers v", *(f"{names[column]} {unit}" for column in columns for unit in ("RDP", "ε")))
    sentences = summary_sentences(report)
    return "\n".join([
        f"<p>Mean loss of each observer {escape(MEAN_RULE)}: Rényi (RDP) at alpha = {model.alpha:g} and ε at "
        f"delta = {model.delta:g} (the mean of each pair's ε); worst {len(shown)} observers shown"
        f"{', observers with identical values in one row' if len(rows) < len(shown) else ''}"
        f"{f', {hidden} more in {REPORT_FILE}' if hidden else ''}. {escape(_conversion_sentence(summary))}</p>",
        _table(headers, rows),
        f"<p>Baselines at the same noise: local DP {_number(baselines.ldp.rdp)} RDP, ε "
        f"{_number(baselines.ldp.eps)}; central DP {_number(baselines.central.rdp)} RDP, ε "
        f"{_number(baselines.central.eps)}.</p>",
        *(_undercount_paragraph(model, variant) for variant in UNDERCOUNT_NAMES
          if getattr(summary, f"{variant}_undercounts") is not None),
        *(f"<p>{escape(sentence)}</p>" for sentence in sentences if sentence),
    ])


def _conversion_sentence(summary: Summary) -> str:
    """How the paper columns' ε relate to the exact column's: on one basis, or by the paper's own rule."""
    conversion = summary.paper_conversion
    if conversion == "tight":
        return ("The paper's ε comes from its per-pair μ by the exact Gaussian profile, the exact column's own "
                "conversion: a pair below the exact loss in RDP is below it in ε too.")
    if conversion == "paper":
        return ("The paper's ε comes from the paper's own classic conversion at alpha (--conversion paper, to "
                "reproduce published figures), not from the exact column's Gaussian profile: compare the two in RDP.")
    return ""


def _undercount_paragraph(model: AuditReport, variant: str) -> str:
    """One closed form's undercount, and at which hop distances: a warning in amber when some pair's exact loss
    exceeds it, worded as what it compares where the exact loss is conditioned on something the observer is not
    told (a walk's path)."""
    undercounts = getattr(model.summary, f"{variant}_undercounts")
    name = UNDERCOUNT_NAMES[variant]
    count, rows, given = undercounts.count, model.pairs_file.rows, undercounts.exact_given
    exact = "the exact loss" if given is None else f"the exact loss given {given} (which the observer is not told)"
    if undercounts.exact_is_bound:
        exact = "exact, a proven upper bound" + ("," if given is None else f" given {given},")
    if not count:
        return f"<p>{escape(name[0].upper() + name[1:])} is at least {escape(exact)} on all {rows} pairs.</p>"
    if undercounts.exact_is_bound:
        return (f"<p>{escape(name[0].upper() + name[1:])} is below {escape(exact)} on {count} of {rows} pairs: no "
                "evidence that it undercounts, since the loss itself may lie below both.</p>")
    worst = _times(undercounts.pairs[0].exact_over_paper)
    where = ", ".join(f"{d.count} of the {d.of} at hop distance {d.hop_distance}"
                      for d in undercounts.by_hop_distance if d.count)
    if given is None:
        text = (f"{name} undercounts {count} of {rows} pairs ({worst}): it is not an upper bound here (the "
                f"exact loss of the whole view is above it){f'; {where}' if where else ''}.")
    else:
        text = (f"{name}, ex ante over {given}, is below {exact} on {count} of {rows} pairs ({worst}): an "
                f"observer told {given} would learn more than the bound there; that is not the same quantity, so it "
                "does not show the bound below what the observer learns.")
    return f'<p class="banner"><span class="warning">⚠ Warning:</span> {escape(text)}</p>'


def _times(ratio: object) -> str:
    """'by up to 3×', or in words where the closed form is 0 below a positive loss (an infinite ratio)."""
    if ratio == "inf" or (isinstance(ratio, float) and np.isinf(ratio)):
        return "by an unbounded factor: the bound is 0 where the exact loss is not"
    return f"by up to {format_number(ratio)}×"


def _columns_section(report: Mapping[str, object]) -> str:
    """Each column in one line: what it is, and what it is conditioned on (where the protocol says)."""
    definitions = report.get("column_definitions") or {}
    if not definitions:
        return ""
    rows = [(escape(name), escape(text)) for name, text in definitions.items()]
    return "\n".join(["<h2>Columns</h2>", "<p>What each column of the pairs file is, and what it is given.</p>",
                      _table(("column", "definition"), rows), _assumptions(report)])


def _assumptions(report: Mapping[str, object]) -> str:
    """The theorem the exact column rests on and each of its conditions (learning runs; nothing elsewhere)."""
    assumptions = report.get("assumptions")
    if not assumptions:
        return ""
    exact = assumptions["exact"]
    conditions = "".join(f"<li>{escape(condition)}</li>" for condition in exact["conditions"])
    return (f"<p><b>exact</b> is a proven bound, {escape(exact['theorem'])}, under these conditions:</p>"
            f"<ul>{conditions}</ul>")


def _faults_section(report: Mapping[str, object]) -> str:
    """Nodes that stopped early and the drop-outs each node logged per neighbour (audits with faults only)."""
    faults = report.get("faults")
    if not faults:
        return ""
    parts = ["<h2>Faults</h2>"]
    if faults["stopped"]:
        parts.append("<ul>" + "".join(f"<li>{escape(stopped_sentence(node))}</li>" for node in faults["stopped"])
                     + "</ul>")
    else:
        parts.append("<p>Every node logged its final output.</p>")
    if faults["drop_outs"]:
        rows = [(str(d["node"]), str(d["peer"]), str(d["count"]), escape(d["rounds"])) for d in faults["drop_outs"]]
        parts += ["<p>Drop-outs: values a neighbour did not deliver before the round's deadline, as each node "
                  "logged them.</p>", _table(("node (logged by)", "neighbour", "drop-outs", "rounds"), rows)]
    return "\n".join(parts)


def _collusion_section(report: Mapping[str, object]) -> str:
    """Who colluded, in one sentence, and every outside source's loss to the coalition beside its best member's."""
    collusion = report.get("collusion")
    if not collusion:
        return ""
    rows = [(str(row["source"]), _number(row["exact_eps_upper"]), _number(row["best_member_exact_eps_upper"]),
             str(row["best_member"]), _number(row["paper_eps"]), _number(row["ldp_eps"]))
            for row in collusion["losses"]]
    return "\n".join([
        "<h2>Collusion</h2>",
        f"<p>{escape(collusion['summary']['sentence'])}</p>",
        _table(("source u", "exact eps to the coalition (upper end)", "exact eps, best member alone",
                "best member", "paper eps (union of messages)", "local DP eps"), rows),
    ])


def _learning_section(report: Mapping[str, object]) -> str:
    """A learning run's final utility against its baselines, and the spread of losses per schedule."""
    parts = []
    utility = report.get("utility")
    if utility and "steps" in utility:  # a curve over steps; personalized learning's utility is its own section
        rows = [(escape(name), _number(utility[name][-1])) for name in ("netdp", "central", "local")]
        parts += [f"<p>Test {escape(utility['metric'])} after step {utility['steps'][-1]} "
                  f"({utility['test_examples']} test examples; {escape(utility['baselines'])}); "
                  f"the starting model theta = 0 scores {_number(utility['initial'])}.</p>",
                  _table(("model", escape(utility["metric"])), rows)]
    comparison = (report.get("learning") or {}).get("schedule_comparison")
    if comparison:
        sides = (comparison["realized"], comparison["planned"])
        rows = [(escape(side_label(side)), *(_number(side["eps"][key]) for key in ("mean", "std", "min", "max")))
                for side in sides]
        parts += [f"<p>Spread of the pairwise loss ({escape(comparison['eps'])}) over the n(n − 1) ordered pairs "
                  "u ≠ v: the run as it happened (realized) against the other schedule, planned.</p>",
                  _table(("schedule", "mean", "std", "min", "max"), rows)]
    return "\n".join(["<h2>Learning</h2>", *parts]) if parts else ""


def _personalized_section(report: Mapping[str, object]) -> str:
    """Personalized learning: every agent's budget against what its log shows it spent, and the models' accuracy."""
    facts = report.get("personalized")
    if not facts:
        return ""
    parts = ["<h2>Personalized learning</h2>",
             "<p>All any node sees of an agent is a post-processing of that agent's broadcasts, so every pair's "
             "loss is its source's composed loss, the same for every observer.</p>"]
    utility = report.get("utility") or {}
    if "budget_curve" in utility:
        rows = [(label, _number(utility[key])) for key, label in (
            ("local", "purely local models"), ("private", "private CD (this run)"),
            ("non_private", "non-private CD (simulated, same updates)"))]
        parts.append(_table(("models", f"mean test {escape(utility['metric'])}"), rows))
    rows = [(str(agent["node"]), str(agent["updates"]), _number(agent["budget"]["epsilon"]),
             _number(agent["budget"]["delta"]), _number(agent["theorem1"]), _number(agent["pld"]),
             "yes" if agent["within_budget"] else '<span class="fail">NO</span>')
            for agent in facts["agents"] if "budget" in agent]
    if rows:
        parts.append(_table(("agent", "updates", "budget eps", "budget delta", "spent (Thm 1)", "spent (PLD)",
                             "within budget"), rows))
    return "\n".join(parts)


def _figure(name: str, path: Path, out_dir: Path) -> str:
    source = escape(Path(path).relative_to(out_dir).as_posix())
    caption = escape(FIGURE_CAPTIONS.get(name, name))
    return f'<figure><img src="{source}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'


def _key_value_table(rows: Mapping[str, object]) -> str:
    return _table(None, [(escape(str(key)), escape(str(value))) for key, value in rows.items()])


def _table(columns: Sequence[str] | None, rows: Iterable[Sequence[str]]) -> str:
    """An HTML table from already-escaped cells; no header row when columns is None."""
    head = "" if columns is None else "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _number(value: object) -> str:
    return escape(format_number(value))
