"""Deliberate privacy bugs, for negative controls: a node that breaks the protocol's promise on purpose.

An audit that passes every honest run proves nothing until it fails a broken one. A break makes
one node misbehave as a real implementation bug would, and nothing else:

* `noise-scale=F`: it draws its noise at F times the published scale (and logs the draws as if at
  the published one, as a buggy node would);
* `skip-clip`: it skips the clipping that bounds its sensitivity (its input or every gradient);
* `leak-raw`: it sends its contribution once more to every neighbour, before any noise, as a
  message of kind `raw` that no protocol has.

`netdp run --break NODE:SPEC` and `netdp-node --break SPEC` set them (tests and demonstrations
only). The node writes its breaks into its run header (`break`), so that nobody mistakes the run
for an honest one; the audit never reads that entry to decide a check: it has to catch the node
from what the run did.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from node.errors import ConfigError

LEAK = "raw"  # the kind of the un-noised value a leak-raw node sends
KINDS = ("noise-scale=F", "skip-clip", "leak-raw")


@dataclass(frozen=True)
class Breaks:
    """The deliberate bugs of one node (none by default)."""

    noise_scale: float = 1.0
    skip_clip: bool = False
    leak_raw: bool = False

    @classmethod
    def parsed(cls, specs: Iterable[str]) -> Breaks:
        """The breaks named by specs like 'noise-scale=0.25', 'skip-clip', 'leak-raw'; ConfigError on any other."""
        breaks = cls()
        for spec in specs:
            name, sep, value = spec.partition("=")
            if name == "noise-scale" and sep:
                try:
                    scale = float(value)
                except ValueError:
                    scale = math.nan
                if not 0.0 <= scale < math.inf:
                    raise ConfigError(f"--break noise-scale takes a finite factor >= 0, got {value!r}")
                breaks = replace(breaks, noise_scale=scale)
            elif spec == "skip-clip":
                breaks = replace(breaks, skip_clip=True)
            elif spec == "leak-raw":
                breaks = replace(breaks, leak_raw=True)
            else:
                raise ConfigError(f"--break {spec!r}: a break is one of {', '.join(KINDS)}")
        return breaks

    @property
    def active(self) -> bool:
        return self != Breaks()

    def header(self) -> dict[str, object]:
        """The run header's `break` entry: the breaks that are on."""
        entry: dict[str, object] = {}
        if self.noise_scale != 1.0:
            entry["noise_scale"] = self.noise_scale
        if self.skip_clip:
            entry["skip_clip"] = True
        if self.leak_raw:
            entry["leak_raw"] = True
        return entry

    def specs(self) -> list[str]:
        """The specs that `parsed` turns back into these breaks (a node process's command line)."""
        return ([f"noise-scale={self.noise_scale!r}"] if self.noise_scale != 1.0 else []) + (
            ["skip-clip"] if self.skip_clip else []) + (["leak-raw"] if self.leak_raw else [])

    def clip_bound(self, bound: float) -> float:
        """The clipping bound the node really applies: none at all when it skips clipping."""
        return math.inf if self.skip_clip else bound
