"""Phase accounting is exclusive: a nested phase counts for itself alone, and the totals add up to the wall."""

import time

from harness.phases import PhaseClock


def test_nested_phases_count_once():
    clock = PhaseClock()
    started = time.perf_counter()
    with clock.phase("correctness"):
        time.sleep(0.02)
        with clock.phase("reference"):
            time.sleep(0.03)
        time.sleep(0.01)
    with clock.phase("reference"):
        time.sleep(0.01)
    wall = time.perf_counter() - started
    assert set(clock.totals) == {"correctness", "reference"}
    assert 0.03 <= clock.totals["correctness"] < 0.03 + 0.02  # 0.02 + 0.01, not the nested 0.03
    assert 0.04 <= clock.totals["reference"] < 0.04 + 0.02
    assert abs(sum(clock.totals.values()) - wall) < 0.005
