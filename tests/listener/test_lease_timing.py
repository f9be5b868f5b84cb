"""The heartbeat's and the fence's timing: a healthy renewal never meets the fence."""

from __future__ import annotations

import pytest

from listener.daemon.producer.leases import fence_margin, heartbeat_interval


@pytest.mark.parametrize("lease", [1, 2, 3, 4, 5, 10, 60, 3600])
def test_a_renewal_due_at_half_life_comes_before_the_fence(lease: int) -> None:
    # extend_leases pushes only leases past half their life; the heartbeat
    # reaches each one within an interval after that. The fence must not
    # fire before then, or every agent of a short lease is stopped at once.
    renewed_by = lease / 2 + heartbeat_interval(lease, sweep_interval=5.0)
    assert renewed_by < lease - fence_margin(lease)
