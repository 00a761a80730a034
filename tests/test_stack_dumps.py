"""$CRUCIBLE_DUMP_STACKS_AFTER_S's dumps: every thread's stack, and no crash of the process they watch."""

import subprocess
import sys
import textwrap

import pytest

from harness import stack_dumps

BUSY = textwrap.dedent("""
    import dataclasses, sys, threading
    from harness import stack_dumps

    stack_dumps.start(0.002)

    def build_many_dataclasses():
        # frames made and freed at a high rate: where faulthandler's lock-free watchdog read freed memory
        for i in range(4000):
            dataclasses.make_dataclass(f"C{i}", [("a", int), ("b", float, dataclasses.field(default=1.0))])

    waiter = threading.Thread(target=threading.Event().wait, args=(5,), name="the-waiter", daemon=True)
    waiter.start()
    build_many_dataclasses()
    print("done", flush=True)
""")


def test_dumps_while_frames_come_and_go_never_crash_the_process_and_name_each_thread():
    proc = subprocess.run([sys.executable, "-c", BUSY], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "done"
    assert "(most recent call first)" in proc.stderr
    assert "in build_many_dataclasses" in proc.stderr  # the main thread's own frame
    assert "[the-waiter]" in proc.stderr and "in wait" in proc.stderr  # every thread, by name
    assert "crucible-stack-dumps" not in proc.stderr  # not its own stack


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_an_interval_that_is_no_time_is_refused(seconds):
    with pytest.raises(ValueError, match="above 0 seconds"):
        stack_dumps.start(seconds)
