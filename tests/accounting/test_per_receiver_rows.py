"""A round protocol may declare its values per receiver (`LinearRoundAuditor.per_receiver`).

Declaring a receiver-independent protocol's values per receiver gives every receiver's copy a row
of its own: the same information, so every view's exact loss is the same as with one row per
(sender, round), under every threat model; and the model gains one row per extra receiver.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.plugin import Addressed, LinearRows, Transcript
from coordinator_tools.audit.protocols.decor import AUDITOR, DecorAuditor
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript


class PerReceiverDecor(DecorAuditor):
    """DECOR's values named per receiver: each receiver's copy is the sender's one value."""

    per_receiver = True

    def addressed_rows(self, run: Transcript, values: Sequence[Addressed]) -> LinearRows:
        return self.message_rows(run, [(w, t) for w, t, _ in values])


@pytest.mark.parametrize("threat_model", [ThreatModel(), ThreatModel(collusion=(0, 2)), ThreatModel(eavesdropper=True)],
                         ids=["curious-observer", "coalition", "eavesdropper"])
def test_one_row_per_receiver_changes_no_exact_loss(threat_model: ThreatModel) -> None:
    topology = api.topology("ring", 5, protocol="decor", sigma=1.0, sigma_cor_ratio=2.0, rounds=3, dimension=1,
                            alpha=2.0, run_id="per-receiver")
    run = planned_transcript(topology, rounds=3, accelerated=False)
    shared, addressed = AUDITOR.linear_model(run), PerReceiverDecor().linear_model(run)
    assert shared.inputs.shape[0] == 5 * 3 and addressed.inputs.shape[0] == 5 * 2 * 3  # two receivers per value
    assert all(len(view) == 2 * 3 for view in addressed.received)
    np.testing.assert_allclose(view_geometry(addressed, threat_model).upper,
                               view_geometry(shared, threat_model).upper, rtol=0, atol=1e-12)


def test_a_protocol_names_its_values_by_its_own_hook() -> None:
    values = [(0, 1, 2), (1, 1, 0)]
    assert AUDITOR.addressed(0, 1, 2) == (0, 1, -1)  # every receiver gets DECOR's one value
    assert PerReceiverDecor().addressed(0, 1, 2) == (0, 1, 2)
    with pytest.raises(NotImplementedError, match="decor declares one value per sender and round"):
        AUDITOR.addressed_rows(planned_transcript(api.topology("ring", 3, protocol="decor", sigma=1.0, rounds=2,
                                                               dimension=1, alpha=2.0)), values)


def test_canary_labels_name_each_receiver_s_copy_as_its_log_does() -> None:
    topology = api.topology("ring", 4, protocol="decor", sigma=1.0, rounds=2, dimension=1, alpha=2.0)
    canaries = PerReceiverDecor().round_canaries(planned_transcript(topology, rounds=2, accelerated=False))
    assert len(canaries.labels) == 4 * 2 * 2 and set(canaries.labels) == {(w, t) for w in range(4) for t in range(2)}
    for v, view in enumerate(canaries.model.received):
        named = [canaries.labels[row] for row in view]
        assert sorted(named) == sorted((w, t) for w in topology.neighbours[v] for t in range(2))  # unique per view
