"""Run one benchmark case in a child Python process, so that its peak memory and CPU time are its own.

The parent starts `python -m bench.isolate TARGET PARAMS OUT` in a new session (its printed
progress going to stderr), waits for it with wait4 (whose CPU time covers the child and every
process it waited for: the node processes of a cluster), and reads what the child wrote to
OUT: the figures and the child's own peak resident size. That peak is the kernel's high-water
mark of the child's memory (VmHWM), not ru_maxrss, which Linux carries over from the parent
across exec and so would report the suite's own size as every case's floor. On a timeout the
whole session is killed, node processes included.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.2


@dataclass(frozen=True)
class Measured:
    """What a case returned, and what it cost its process tree."""

    figures: dict
    wall_s: float
    cpu_s: float
    peak_rss_mib: float  # of the case's own process (not its node processes)


def run_case(target: str, params: dict, *, timeout_s: float, cwd: Path | None = None,
             pythonpath: Sequence[Path] = ()) -> Measured:
    """Call `module:function(**params)` in a child process; its JSON figures and resource usage."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(path) for path in pythonpath)
    with tempfile.TemporaryDirectory(prefix="netdp-bench-case-") as folder:
        out = Path(folder) / "figures.json"
        command = [sys.executable, "-m", "bench.isolate", target, json.dumps(params), str(out)]
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=sys.stderr, start_new_session=True)
        status, usage = _wait(child, timeout_s)
        wall = time.perf_counter() - start
        if status is None:
            raise RuntimeError(f"{target}({params}) did not finish within {timeout_s:.0f} s")
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{target}({params}) failed with exit code {os.waitstatus_to_exitcode(status)}")
        written = json.loads(out.read_text())
    return Measured(figures=written["figures"], wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                    peak_rss_mib=written["peak_rss_mib"])


def _wait(child: subprocess.Popen, timeout_s: float) -> tuple[int | None, os.struct_rusage | None]:
    """wait4 the child until it exits or the deadline passes (then kill its session)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return status, usage
        time.sleep(POLL_S)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return None, None


def peak_rss_mib() -> float:
    """This process's peak resident size so far (MiB): VmHWM, which starts afresh at exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("/proc/self/status has no VmHWM line: peak memory needs Linux")


def _child(target: str, params: str, out: str) -> None:
    """The child's side: import the target, call it, write its figures and this process's peak memory."""
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    figures = function(**json.loads(params))
    Path(out).write_text(json.dumps({"figures": figures, "peak_rss_mib": peak_rss_mib()}) + "\n")


if __name__ == "__main__":
    _child(*sys.argv[1:4])
