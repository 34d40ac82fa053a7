"""The collector's pace during a run: the set-up heap frozen, young collections rarer, both undone after."""

from __future__ import annotations

import gc

import pytest

from node.heap import RUN_THRESHOLDS, run_pace


def test_a_run_freezes_what_set_it_up_and_restores_the_collector_after():
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with run_pace():
        assert gc.get_threshold() == RUN_THRESHOLDS
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with run_pace():  # a run inside a run (a test driving an in-process run from a node) keeps the outer's
            pass
        assert gc.get_threshold() == RUN_THRESHOLDS and gc.get_freeze_count() >= frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_run_that_fails_still_restores_the_collector():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), run_pace():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
