"""Loading one entry-point group of netdp plug-ins (protocols, learning tasks): the shared mechanics.

Each entry names one plug-in and points at an object of the group's plug-in class whose `name`
is the entry's; netdp's own entries come first, then the others, each by name. A broken, foreign
or clashing entry is a one-line ConfigError naming it, so an installed package cannot fail silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Protocol, TypeVar

from node.errors import ConfigError

NETDP_DISTRIBUTION = "netdp"


class Named(Protocol):
    """What every plug-in object carries: the name it is registered under."""

    @property
    def name(self) -> str: ...


PluginT = TypeVar("PluginT", bound=Named)


def load_group(group: str, kind: type[PluginT], what: str) -> Mapping[str, PluginT]:
    """Every entry of `group` loaded and checked to be a `kind` called by its entry's name."""
    found: dict[str, PluginT] = {}
    for entry in sorted(entry_points(group=group), key=_registration_order):
        plugin = _load(entry, group, kind, what)
        if entry.name in found:
            raise ConfigError(f"{what} {entry.name!r} is registered twice in {group} "
                              f"(the second time by {entry.value})")
        found[entry.name] = plugin
    return MappingProxyType(found)


def _registration_order(entry: EntryPoint) -> tuple[bool, str]:
    return (entry.dist is None or entry.dist.name != NETDP_DISTRIBUTION, entry.name)


def _load(entry: EntryPoint, group: str, kind: type[PluginT], what: str) -> PluginT:
    try:
        plugin = entry.load()
    except Exception as exc:  # an installed package that cannot be imported: say which one
        raise ConfigError(f"{what} {entry.name!r} ({entry.value}) cannot be loaded: {exc}") from exc
    if not isinstance(plugin, kind):
        raise ConfigError(f"{group} entry {entry.name!r} ({entry.value}) is not a {kind.__name__}")
    if plugin.name != entry.name:
        raise ConfigError(f"{group} entry {entry.name!r} registers a {what} called {plugin.name!r}")
    return plugin
