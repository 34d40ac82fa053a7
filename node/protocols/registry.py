"""Every protocol netdp can run, as registered in the `netdp.protocols` entry-point group.

Each entry names one protocol and points at its `ProtocolPlugin`; netdp's own protocols are
registered there by netdp's pyproject.toml exactly as another package registers its own, so
installing a package is all it takes to add a protocol. The group is scanned once per process.
Netdp's own come first, then the others, each by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import import_module
from typing import Any

from node.errors import ConfigError
from node.protocols.base import ProtocolPlugin, ProtocolSpec
from node.registration import load_group

ENTRY_POINT_GROUP = "netdp.protocols"


@cache
def plugins() -> Mapping[str, ProtocolPlugin[Any, Any]]:
    """Every registered protocol by name, loaded once; a broken or clashing entry is a ConfigError naming it."""
    return load_group(ENTRY_POINT_GROUP, ProtocolPlugin, "protocol")


def protocol_names() -> tuple[str, ...]:
    """The names of every registered protocol, in registration order."""
    return tuple(plugins())


def protocol_plugin(name: str) -> ProtocolPlugin[Any, Any]:
    """The protocol called `name`; a one-line error naming the known ones otherwise."""
    try:
        return plugins()[name]
    except KeyError:
        raise ConfigError(f"unknown protocol {name!r}; this node runs {', '.join(sorted(plugins()))}") from None


def protocol_spec(name: str) -> ProtocolSpec[Any, Any]:
    """The node's side of the protocol called `name`."""
    return protocol_plugin(name).spec


def protocol_specs() -> tuple[ProtocolSpec[Any, Any], ...]:
    """The node's side of every registered protocol, in registration order."""
    return tuple(plugin.spec for plugin in plugins().values())


def load_attribute(path: str) -> Any:
    """The object a "module:attribute" path names (a plug-in's auditor, options or demo)."""
    module, _, attribute = path.partition(":")
    try:
        return getattr(import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {path}: {exc}") from exc
