"""Error types shared by the node and the coordinator tools."""

from __future__ import annotations


class NetdpError(Exception):
    """Base class of every error netdp reports to a user as a one-line message."""


class ConfigError(NetdpError):
    """A configuration, topology or data file is missing or does not validate."""


class LogFormatError(NetdpError):
    """A view log cannot be read at all (wrong magic, unreadable file)."""


class LogExistsError(NetdpError, FileExistsError):
    """A log folder already holds a log: a node never overwrites one, and never rejoins a run it left."""


class LogResumeError(NetdpError):
    """A restarted node cannot rejoin from its log folder: not this run's log as it would write it, or damaged."""
