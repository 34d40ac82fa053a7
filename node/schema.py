"""Loading pydantic-validated files with one-line, field-naming error messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from node.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def describe_validation_error(error: ValidationError) -> str:
    """Name the first offending field and say what is wrong with it, on one line."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = error.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"field '{location}': {first['msg']}{suffix}"


def load_model(model: type[ModelT], path: Path) -> ModelT:
    """Read a JSON file into `model`, raising ConfigError with a one-line message."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read file ({exc.strerror})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from None


def save_model(instance: BaseModel, path: Path) -> None:
    """Write a model as indented JSON, atomically (write then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(instance.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
