"""`netdp reproduce NAME`: the papers' headline figures, from real or virtual runs, beside the published values.

Each reproduction is one module here that declares a `Reproduction` (`outcome.py`): which paper and
figure, the values the paper publishes, and a function that runs netdp (virtual or networked runs,
audits, plans) and returns what it measured. `command.py` runs one, writes its folder and prints the
table; the modules know nothing of files or the console.
"""
