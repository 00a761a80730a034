"""Phase accounting is exclusive: a nested phase counts for itself alone, and the totals add up to the wall."""

import harness.pipeline.phases
from harness.pipeline.phases import PhaseClock


def test_nested_phases_count_once(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(harness.pipeline.phases.time, "perf_counter", lambda: now[0])

    def spend(seconds):
        now[0] += seconds

    clock = PhaseClock()
    with clock.phase("correctness"):
        spend(2.0)
        with clock.phase("reference"):
            spend(3.0)
        spend(1.0)
    with clock.phase("reference"):
        spend(0.5)
    assert clock.totals == {"correctness": 3.0, "reference": 3.5}  # not 6.0 for correctness: the nested 3 s are
    assert sum(clock.totals.values()) == now[0]  # the reference's alone, and the totals are the wall
