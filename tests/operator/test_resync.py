"""When each service's resync comes: spread over a minute by its uid, the same every time."""

from specops_operator._handlers import RECHECK_SECONDS, _resync_delay


def test_a_fleet_created_at_once_resyncs_spread_over_a_minute() -> None:
    uids = [f"0b6f3c1e-7d2a-4c55-9e1f-{i:012x}" for i in range(1000)]
    delays = [_resync_delay(uid=uid) for uid in uids]
    assert all(RECHECK_SECONDS <= d < 2 * RECHECK_SECONDS for d in delays)
    # Every tenth of the minute gets about a tenth of the fleet.
    tenths = [0] * 10
    for delay in delays:
        tenths[int((delay - RECHECK_SECONDS) / RECHECK_SECONDS * 10)] += 1
    assert min(tenths) > 60 and max(tenths) < 140, tenths
    assert delays == [_resync_delay(uid=uid) for uid in uids]
