"""Loading pydantic-validated files with one-line, field-naming error messages."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from node.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def describe_validation_error(error: ValidationError, document: object = None, model: type[BaseModel] | None = None,
                              flags: Mapping[str, str] | None = None) -> str:
    """Name the first offending field and say what is wrong with it, on one line.

    An unknown field comes first, with the known name it is closest to: a misspelt key also makes
    its real field "missing", and the typo is what the user has to fix. Pass the validated
    `document` (the parsed JSON) when there is one: pydantic puts the tag of a discriminated union
    into the error's location ('protocol.muffliato.sigma'), and the document tells those tags apart
    from the field names a user wrote ('protocol.sigma'); `model` lets a typo of a field that has a
    default be matched too. `flags` maps a field to how the user gave its value ('sigma' -> 'argument
    --sigma', or an experiment file's key): the error then names what the user typed, a value so given first.
    """
    errors = error.errors(include_url=False)
    flagged = [item for item in errors if item["loc"] and str(item["loc"][-1]) in (flags or {})]
    first = next((item for item in errors if item["type"] == "extra_forbidden"), (flagged or errors)[0])
    written = _written_location(first["loc"], document)
    location = ".".join(str(part) for part in written)
    more = error.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if first["type"] == "extra_forbidden":
        known = _known_fields(first["loc"][:-1], errors, model)
        close = difflib.get_close_matches(str(first["loc"][-1]), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field {location!r}{hint}{suffix}"
    message = _message(first)
    flag = (flags or {}).get(str(written[-1])) if written else None
    if flag is not None:
        return f"{flag}: {message}{suffix}"
    return f"field '{location}': {message}{suffix}" if location else f"{message}{suffix}"


def _known_fields(parent: Sequence[int | str], errors: Sequence[Any], model: type[BaseModel] | None) -> list[str]:
    """The field names valid beside an unknown one: its model's fields where `model` resolves along `parent`,
    and the required fields reported missing there (which a misspelling leaves missing)."""
    missing = [str(item["loc"][-1]) for item in errors
               if item["type"] == "missing" and tuple(item["loc"][:-1]) == tuple(parent)]
    here = model
    for part in parent:
        field = here.model_fields.get(str(part)) if here is not None else None
        if field is None:  # a list index, a union tag or an opaque type: the models below are not known here
            here = None if isinstance(part, str) else here
            continue
        here = _model_in(field.annotation)
    return missing + ([] if here is None else list(here.model_fields))


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The one pydantic model an annotation holds (`Model`, `list[Model]`, `Model | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation is not BaseModel:
        return annotation
    found = [model for model in map(_model_in, get_args(annotation)) if model is not None]
    return found[0] if len(found) == 1 else None


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
        raise ConfigError(f"{path}: {describe_validation_error(exc, raw, model)}") from None


def save_model(instance: BaseModel, path: Path) -> None:
    """Write a model as indented JSON, atomically (write then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(instance.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


@contextmanager
def config_errors(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Report a bad parameter, found by a validator (a Params model, a graph generator, the theory), as a
    one-line ConfigError: what a command line says about a value it was given, never a traceback.

    `flags` maps the fields the command line filled to how the user gave them ('argument --sigma', an experiment
    file's key), so that the error names what the user typed rather than the model's field.
    """
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, flags=flags)) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
