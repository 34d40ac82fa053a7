"""Every learning task netdp can train, as registered in the `netdp.tasks` entry-point group.

Each entry names one task and points at its `TaskPlugin`; netdp's own tasks are registered by
netdp's pyproject.toml exactly as another package registers its own, so a user brings a model and
its dataset loaders by installing a package. The group is scanned once per process. A protocol's
`task` parameter stays a string (topology files are unchanged) checked against this registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated

from pydantic import AfterValidator

from node.errors import ConfigError
from node.registration import load_group
from node.tasks.base import DatasetLoader, TaskPlugin, TaskSpec

ENTRY_POINT_GROUP = "netdp.tasks"


@cache
def task_plugins() -> Mapping[str, TaskPlugin]:
    """Every registered task by name, loaded once; a broken or clashing entry is a ConfigError naming it."""
    return load_group(ENTRY_POINT_GROUP, TaskPlugin, "task")


def task_names() -> tuple[str, ...]:
    """The names of every registered task, in registration order."""
    return tuple(task_plugins())


def task_plugin(name: str) -> TaskPlugin:
    """The task called `name`; a one-line error naming the known ones otherwise."""
    try:
        return task_plugins()[name]
    except KeyError:
        raise ConfigError(f"unknown learning task {name!r}; registered: {', '.join(task_names())}") from None


def task_spec(name: str) -> TaskSpec:
    """The model of the task called `name`."""
    return task_plugin(name).spec


def task_datasets() -> Mapping[str, tuple[str, DatasetLoader]]:
    """Every dataset a registered task brings, by name: the task that brings it and its loader."""
    found: dict[str, tuple[str, DatasetLoader]] = {}
    for plugin in task_plugins().values():
        for dataset, loader in plugin.datasets.items():
            if dataset in found:
                raise ConfigError(f"dataset {dataset!r} is brought by both task {found[dataset][0]!r} "
                                  f"and task {plugin.name!r}")
            found[dataset] = (plugin.name, loader)
    return found


def _registered(name: str) -> str:
    if name not in task_plugins():
        raise ValueError(f"unknown learning task {name!r}; registered: {', '.join(task_names())}")
    return name


# A protocol's `task` parameter: a registered task's name.
TaskName = Annotated[str, AfterValidator(_registered)]
