"""netdp is not on a package index: this example depends on the netdp checkout it ships in (two folders up)."""

from pathlib import Path

from setuptools import setup

NETDP = Path(__file__).resolve().parents[2]
setup(install_requires=[f"netdp @ {NETDP.as_uri()}"])
