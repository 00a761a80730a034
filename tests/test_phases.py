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


def test_the_timeline_marks_seconds_since_the_process_started_only_when_asked(monkeypatch, capsys):
    """CRUCIBLE_TIMELINE=1: one stderr line per mark, seconds since the exec (so the interpreter's start and the
    imports before any harness code are on it), increasing; unset: nothing."""
    import time

    from harness.pipeline import phases

    monkeypatch.delenv(phases.TIMELINE_ENV, raising=False)
    phases.timeline("quiet")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(phases.TIMELINE_ENV, "1")
    phases.timeline("first")
    time.sleep(0.05)
    phases.timeline("second")
    lines = [line.split() for line in capsys.readouterr().err.splitlines()]
    assert [(w[0], w[2]) for w in lines] == [("timeline", "first"), ("timeline", "second")]
    first, second = float(lines[0][1]), float(lines[1][1])
    assert second - first >= 0.045
    age = phases._process_age_s()
    assert age is not None and first <= age + 0.05 and first > 0  # this process started before the test did
