"""Loading pydantic-validated files with one-line, field-naming error messages."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from node.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def describe_validation_error(error: ValidationError, document: object = None) -> str:
    """Name the first offending field and say what is wrong with it, on one line.

    Pass the validated `document` (the parsed JSON) when there is one: pydantic puts the tag
    of a discriminated union into the error's location ('protocol.muffliato.sigma'), and the
    document tells those tags apart from the field names a user wrote ('protocol.sigma').
    """
    first = error.errors(include_url=False)[0]
    location = ".".join(str(part) for part in _written_location(first["loc"], document))
    more = error.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    message = _message(first)
    return f"field '{location}': {message}{suffix}" if location else f"{message}{suffix}"


def _written_location(location: Sequence[int | str], document: object) -> list[int | str]:
    """The parts of an error location that name keys and indices of the document itself.

    A part that is not a key of the mapping it points into, but one of that mapping's values,
    is a union tag (the value of its discriminator field) and is dropped.
    """
    written: list[int | str] = []
    here: object = document
    for part in location:
        if isinstance(here, Mapping):
            if part in here:
                here = here[part]
            elif part in here.values():
                continue
            else:
                here = None
        elif isinstance(here, Sequence) and not isinstance(here, str) and isinstance(part, int) and part < len(here):
            here = here[part]
        else:
            here = None
        written.append(part)
    return written


def _message(error: Any) -> str:
    """pydantic's message, minus its 'Value error, ' prefix, with unknown union tags listed plainly."""
    context = error.get("ctx") or {}
    if error["type"] == "union_tag_invalid":
        field = str(context["discriminator"]).strip("'")
        return f"unknown {field} {context['tag']!r}; known: {context['expected_tags']}"
    if error["type"] == "value_error":
        return str(context.get("error", error["msg"]))
    return str(error["msg"])


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
        raise ConfigError(f"{path}: {describe_validation_error(exc, raw)}") from None


def save_model(instance: BaseModel, path: Path) -> None:
    """Write a model as indented JSON, atomically (write then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(instance.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


@contextmanager
def config_errors() -> Iterator[None]:
    """Report a bad parameter, found by a validator (a Params model, a graph generator, the theory), as a
    one-line ConfigError: what a command line says about a value it was given, never a traceback."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
