"""Every reproduction `netdp reproduce` knows, by name: one module each, exposing `REPRODUCTION`."""

from __future__ import annotations

import importlib

from coordinator_tools.reproduce.outcome import Reproduction

# One module per paper figure; the order is the one `netdp reproduce --list` prints.
MODULES = (
    "muffliato_fig1a",
    "muffliato_fig1bc",
    "pad_ring",
    "pad_complete",
    "icml2024_fig1",
    "icml2024_fig3",
    "aistats2018_fig2",
    "decor_libsvm",
)


def reproductions() -> dict[str, Reproduction]:
    """{name: reproduction}, in the order of MODULES."""
    found = [importlib.import_module(f"coordinator_tools.reproduce.{module}").REPRODUCTION for module in MODULES]
    return {reproduction.name: reproduction for reproduction in found}
