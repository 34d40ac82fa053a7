"""The page over `netdp reproduce --all`: findings first, then every figure beside the paper with its verdict.

A referee reading it must tell a finding (netdp differs from the paper in the paper's own setting)
from a stated substitution (another data set, fewer nodes, ...), check each finding with one
command, and open the audits behind every number; summary.json carries the same content.
Beside each reproduction's own statement-against-proof cases, the page lists those its audits
hold: PAbD Thm 2's statement beside its proof (every ring-histogram audit keeps both) and the Rényi
orders ICML 2024 Thm 3 covers (every rw-sgd audit: the order its statement is applied at, the
largest one its proof holds at), one row per distinct pair of values with the number of audits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from coordinator_tools.reproduce.outcome import FINDING, SEVERITY
from coordinator_tools.reproduce.result import ReproductionResult, ResultRow, StatementVsProofEntry

PAGE_FILE = "index.html"
SUMMARY_FILE = "summary.json"  # the page's content as data, beside it
AUDIT_PAGE = "index.html"  # the audit's own page inside each audit folder (coordinator_tools.audit.html)
STYLE = """body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}table{border-collapse:collapse;
margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}
.finding{background:#fde2e2}.differs{background:#fff4d6}.reproduced{background:#e3f6e3}img{max-width:100%}
code{background:#f3f3f3;padding:1px 3px}"""


def command_line(name: str, scale: str, seed: int) -> str:
    """The command that reruns one reproduction exactly (same scale, same base seed)."""
    return f"netdp reproduce {name} --scale {scale} --seed {seed}"


def modified_note(stamp: Mapping[str, object]) -> str:
    """Said after the stamp's commit when tracked files differed from it as the reproductions ran."""
    return " (with uncommitted changes to tracked files)" if stamp.get("uncommitted_changes") else ""


def audit_statements(folder: Path, runs: Sequence[str]) -> list[StatementVsProofEntry]:
    """The statement-against-proof cases the audits among `runs` (folders under `folder`) hold, one per distinct
    theorem and pair of values, the number of audits in its name."""
    found: dict[tuple[str, object, object], tuple[StatementVsProofEntry, int]] = {}
    for path in runs:
        report_file = folder / path / "report.json"
        if not path.endswith("audit") or not report_file.is_file():
            continue
        entry = _audit_statement(json.loads(report_file.read_text(encoding="utf-8")))
        if entry is not None:
            key = (entry.theorem, entry.statement_value, entry.proof_value)
            found[key] = (entry, found.get(key, (entry, 0))[1] + 1)
    return [entry.model_copy(update={"theorem": f"{entry.theorem} ({count} audit{'s' * (count > 1)})"})
            for entry, count in found.values()]


def _audit_statement(report: Mapping[str, Any]) -> StatementVsProofEntry | None:
    """A ring-histogram audit's Thm 2 statement and proof, or an rw-sgd audit's Thm 3 orders; None otherwise."""
    paper = (report.get("token_walk") or {}).get("paper") or {}
    if report.get("protocol") == "ring-histogram" and paper.get("stated"):
        return StatementVsProofEntry(
            theorem="PAbD Thm 2 (ring histogram), eps of every pair",
            statement="as stated: gamma such that RR_gamma is 12 eps sqrt(ln(1/delta)/n)-LDP",
            statement_value=paper["stated"]["eps"],
            proof="as the proof applies Erlingsson et al.'s Cor. 9: 12 eps0 sqrt(ln(1/delta_w)/n) per window",
            proof_value=paper["eps"], used="proof (the audit's paper column)", why=paper["stated"]["why_not_used"])
    theorem3 = (report.get("rw_sgd") or {}).get("theorem3")
    if report.get("protocol") == "rw-sgd" and theorem3:
        outside = "" if theorem3["order_valid"] else " (the audit's order is beyond it: its paper rdp is null)"
        return StatementVsProofEntry(
            theorem=f"ICML 2024 Thm 3 (rw-sgd), Renyi order, noise multiplier {theorem3['noise_multiplier']:.4g}",
            statement="stated at every order alpha > 1: the audit's alpha", statement_value=report["alpha"],
            proof="its proof needs sigma_m^2 >= 2 alpha (alpha - 1): the largest order it holds at",
            proof_value=theorem3["largest_valid_order"], used="proof (orders where it holds)",
            why="beyond that order the proof's step fails, so the audit converts Thm 3 to eps over the orders where "
                f"it holds only{outside}")
    return None


def summary_entry(document: ReproductionResult, scale: str, seed: int, folder: Path) -> dict[str, object]:
    """One reproduction in summary.json: its verdict, deviations, statement-vs-proof cases (its own, then its
    audits'), judged rows, findings; `folder` holds its runs."""
    rows = [row for row in document.rows if row.verdict is not None]
    command = command_line(document.name, scale, seed)
    return {
        "name": document.name, "paper": document.paper, "figure": document.figure,
        "claim": document.claim, "verdict": document.verdict, "summary": document.summary,
        "folder": document.name, "command": command,
        "audits": [f"{document.name}/{path}/{AUDIT_PAGE}" for path in document.runs if path.endswith("audit")],
        "deviations": [deviation.model_dump() for deviation in document.deviations],
        "statement_vs_proof": [entry.model_dump() for entry in (*document.statement_vs_proof,
                                                                *audit_statements(folder, document.runs))],
        "verdicts": [row.model_dump(include={"quantity", "published", "measured", "unit", "verdict", "evidence"})
                     for row in rows],
        "findings": [{"quantity": row.quantity, "text": _finding_text(document, row), "command": command}
                     for row in rows if row.verdict == FINDING],
    }


def _finding_text(document: ReproductionResult, row: ResultRow) -> str:
    """Two sentences: what netdp measured against what the paper has, then the evidence."""
    published = "no number" if row.published is None else f"{row.published:.4g}"
    evidence = str(row.evidence)
    sentence = evidence if evidence.startswith("netdp") else evidence[:1].upper() + evidence[1:]
    return (f"{document.paper} {document.figure}, {row.quantity}: netdp measures {row.measured:.4g} "
            f"where the paper has {published}. {sentence}")


def render(summary: Mapping[str, object], documents: Sequence[ReproductionResult]) -> str:
    """The whole page: stamp, findings, the verdict table, then one section per reproduction."""
    entries = summary["reproductions"]
    stamp = summary["stamp"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>netdp reproductions ({summary['scale']})"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>The papers' figures on netdp's runs ({escape(str(summary['scale']))} scale)</h1>",
             f"<p>Commit <code>{escape(str(stamp['commit']))}</code>{modified_note(stamp)} on "
             f"{escape(str(stamp['machine']))} "
             f"({escape(str(stamp['platform']))}, {stamp['cpus']} CPUs), {escape(str(stamp['time']))}; base seed "
             f"{summary['seed']}. Verdicts: <b>reproduced</b>; <b>differs (stated deviation)</b>: netdp's setup "
             "differs from the paper's in a stated way; <b>finding</b>: netdp differs in the paper's own setting.</p>",
             "<h2>Findings</h2>", _findings(entries), "<h2>Verdicts</h2>", _overview(entries)]
    parts += [_section(entry, document) for entry, document in zip(entries, documents, strict=True)]
    parts.append("</body></html>")
    return "\n".join(parts)


def _findings(entries: Sequence[Mapping[str, object]]) -> str:
    items = [f"<li>{escape(finding['text'])}<br><code>{escape(finding['command'])}</code></li>"
             for entry in entries for finding in entry["findings"]]
    return f"<ol>{''.join(items)}</ol>" if items else "<p>None.</p>"


def _overview(entries: Sequence[Mapping[str, object]]) -> str:
    rows = "".join(
        f"<tr class='{_css(entry['verdict'])}'><td><a href='#{escape(entry['name'])}'>{escape(entry['name'])}</a></td>"
        f"<td>{escape(entry['paper'])} {escape(entry['figure'])}</td><td>{escape(entry['verdict'])}</td>"
        f"<td>{len(entry['findings'])}</td><td>{len(entry['deviations'])}</td></tr>"
        for entry in sorted(entries, key=lambda entry: -SEVERITY[entry["verdict"]]))
    return ("<table><tr><th>reproduction</th><th>paper, figure</th><th>verdict</th><th>findings</th>"
            f"<th>deviations</th></tr>{rows}</table>")


def _section(entry: Mapping[str, object], document: ReproductionResult) -> str:
    name = escape(str(entry["name"]))
    figures = "".join(f"<img src='{name}/{escape(figure)}' alt='{escape(figure)}'>" for figure in document.figures)
    audits = " ".join(f"<a href='{escape(link)}'>{escape(link.split('/', 1)[1].rsplit('/', 1)[0])}</a>"
                      for link in entry["audits"])
    return (f"<h2 id='{name}'>{name}: {escape(str(entry['paper']))} {escape(str(entry['figure']))}</h2>"
            f"<p><i>{escape(str(entry['claim']))}</i></p><p class='{_css(entry['verdict'])}'>Verdict: "
            f"<b>{escape(str(entry['verdict']))}</b>. {escape(str(entry['summary']))}</p>"
            f"<p>Rerun: <code>{escape(str(entry['command']))}</code>; files: <a href='{name}/result.json'>result.json"
            f"</a>, <a href='{name}/table.csv'>table.csv</a>; audits: {audits or 'none'}</p>{figures}"
            f"{_rows(document.rows)}{_deviations(entry['deviations'])}{_statements(entry['statement_vs_proof'])}")


def _rows(rows: Sequence[ResultRow]) -> str:
    body = "".join(
        f"<tr class='{_css(row.verdict)}'><td>{escape(row.quantity)}</td><td>{_number(row.published)}</td>"
        f"<td>{_number(row.measured)}</td><td>{escape(row.unit)}</td>"
        f"<td>{escape(row.verdict or 'context (nothing published to compare)')}</td>"
        f"<td>{escape(row.evidence or '')}</td><td>{escape(row.note)}</td></tr>" for row in rows)
    return ("<table><tr><th>quantity</th><th>published</th><th>netdp</th><th>unit</th><th>verdict</th>"
            f"<th>evidence</th><th>note</th></tr>{body}</table>")


def _deviations(deviations: Sequence[Mapping[str, str]]) -> str:
    if not deviations:
        return "<p>No deviation from the paper's setup.</p>"
    body = "".join(f"<tr><td>{escape(d['aspect'])}</td><td>{escape(d['paper'])}</td><td>{escape(d['netdp'])}</td>"
                   f"<td>{escape(d['why'])}</td></tr>" for d in deviations)
    return ("<h3>Deviations from the paper</h3><table><tr><th>aspect</th><th>paper</th><th>netdp</th><th>why</th>"
            f"</tr>{body}</table>")


def _statements(entries: Sequence[Mapping[str, object]]) -> str:
    if not entries:
        return ""
    body = "".join(f"<tr><td>{escape(e['theorem'])}</td><td>{escape(e['statement'])}</td>"
                   f"<td>{_number(e['statement_value'])}</td><td>{escape(e['proof'])}</td>"
                   f"<td>{_number(e['proof_value'])}</td><td>{escape(e['used'])}</td><td>{escape(e['why'])}</td></tr>"
                   for e in entries)
    return ("<h3>Statement against proof</h3><table><tr><th>theorem</th><th>statement</th><th>value</th><th>proof</th>"
            f"<th>value</th><th>netdp uses</th><th>why</th></tr>{body}</table>")


def _number(value: object) -> str:
    return "-" if value is None else f"{value:.4g}"


def _css(verdict: object) -> str:
    return {"reproduced": "reproduced", "finding": "finding"}.get(str(verdict), "differs" if verdict else "")
