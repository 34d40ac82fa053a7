"""SCHEMA.md and report.schema.json, generated from the report's models (`report_schema`).

    python -m coordinator_tools.audit.schema_doc

rewrites both files beside this module; a test fails when the committed ones differ from what the models give.
Each block of SCHEMA.md is its model's docstring, then, for the blocks whose keys are tabled, one row per field.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from coordinator_tools.audit.report_schema import (
    SCHEMA_VERSION,
    Assumptions,
    AuditReport,
    CheckResult,
    CollusionBlock,
    LearningBlock,
    PairsFile,
    PersonalizedBlock,
    PlanBlock,
    ReplayBlock,
    ReportCore,
    RunSection,
    RwSgdBlock,
    Summary,
    TokenWalkBlock,
)

HERE = Path(__file__).parent
SCHEMA_MD = HERE / "SCHEMA.md"
SCHEMA_JSON = HERE / "report.schema.json"
REGENERATE = "python -m coordinator_tools.audit.schema_doc"
# The blocks in reading order, each with whether a table of its own fields follows its prose.
BLOCKS: tuple[tuple[type[BaseModel], bool], ...] = (
    (ReportCore, True), (AuditReport, True), (CollusionBlock, False), (LearningBlock, False), (RunSection, False),
    (PairsFile, False), (Summary, True), (CheckResult, False), (ReplayBlock, False), (PlanBlock, False),
    (TokenWalkBlock, False), (Assumptions, False), (RwSgdBlock, False), (PersonalizedBlock, False),
)
# Only the top level's table has a type column (its keys' JSON types).
TYPED_TABLES = (ReportCore,)


def schema_markdown() -> str:
    """SCHEMA.md: the title, then every block's prose and table."""
    parts = [f"# Audit report schema (`{SCHEMA_VERSION}`)"]
    for model, tabled in BLOCKS:
        parts.append(inspect.cleandoc(model.__doc__ or ""))
        if tabled:
            parts.append(_table(model))
    return "\n\n".join(parts) + "\n"


def schema_json() -> str:
    """The JSON Schema of a report document (the audit's keys included), for tools and the docs site."""
    schema = AuditReport.model_json_schema(by_alias=True)
    schema["$id"] = SCHEMA_VERSION
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def write_schema_files() -> list[Path]:
    """Write SCHEMA.md and report.schema.json from the models."""
    SCHEMA_MD.write_text(schema_markdown(), encoding="utf-8")
    SCHEMA_JSON.write_text(schema_json(), encoding="utf-8")
    return [SCHEMA_MD, SCHEMA_JSON]


def _table(model: type[BaseModel]) -> str:
    """One row per field the model adds to its parents: key, (JSON type,) description."""
    typed = model in TYPED_TABLES
    inherited = {name for base in model.__mro__[1:] for name in getattr(base, "model_fields", {})}
    properties = model.model_json_schema(by_alias=True, ref_template="{model}")["properties"]
    rows = ["| key | type | meaning |" if typed else "| key | meaning |", "|---|---|---|" if typed else "|---|---|"]
    for name, field in model.model_fields.items():
        if name in inherited:
            continue
        key = field.alias or name
        meaning = (field.description or "").replace("|", "\\|")
        cells = [f"`{key}`", *([_json_type(properties[key])] if typed else []), meaning]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _json_type(prop: dict[str, Any]) -> str:
    """A field's JSON type in words; "or null" is left out (the meaning says when a key is null)."""
    options = [option for option in prop.get("anyOf", [prop]) if option.get("type") != "null"]
    words = []
    for option in options:
        kind = "object" if "$ref" in option else option.get("type", "object")
        if kind == "array" and option.get("items", {}).get("type") == "string":
            kind = "array of strings"
        elif kind == "integer":
            kind = "number"
        words.append(kind)
    return " or ".join(dict.fromkeys(words))


if __name__ == "__main__":
    for path in write_schema_files():
        print(path)
