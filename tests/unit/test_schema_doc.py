"""SCHEMA.md and report.schema.json are what the report's models generate, and a written report validates."""

from __future__ import annotations

import json

from coordinator_tools.audit.report_schema import SCHEMA_VERSION, AuditReport
from coordinator_tools.audit.schema_doc import REGENERATE, SCHEMA_JSON, SCHEMA_MD, schema_json, schema_markdown


def test_committed_schema_md_is_generated_from_the_models() -> None:
    assert SCHEMA_MD.read_text(encoding="utf-8") == schema_markdown(), (
        f"{SCHEMA_MD.name} differs from what the report models generate; run `{REGENERATE}` and commit it")


def test_committed_json_schema_is_generated_from_the_models() -> None:
    assert SCHEMA_JSON.read_text(encoding="utf-8") == schema_json(), (
        f"{SCHEMA_JSON.name} differs from what the report models generate; run `{REGENERATE}` and commit it")


def test_every_top_level_key_and_summary_key_is_documented() -> None:
    markdown = schema_markdown()
    schema = json.loads(schema_json())
    assert markdown.startswith(f"# Audit report schema (`{SCHEMA_VERSION}`)\n")
    assert schema["$id"] == SCHEMA_VERSION
    for name, field in AuditReport.model_fields.items():
        key = field.alias or name
        assert field.description, key
        assert f"| `{key}` |" in markdown, key
        assert schema["properties"][key]["description"] == field.description
    summary = schema["$defs"]["Summary"]["properties"]
    assert len(summary) == 16 and all(f"| `{key}` |" in markdown for key in summary)
