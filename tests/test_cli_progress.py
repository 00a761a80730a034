"""What `harness submit` shows on stderr while it works: bars on a terminal, timestamped lines elsewhere."""

import io
import threading

from rich.console import Console

from harness.cli_progress import lines, submit_progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_log_gets_a_line_per_solution_and_per_workload_start_and_end_with_seconds():
    buf, clock = io.StringIO(), Clock()
    console = Console(file=buf, force_terminal=False, width=200)
    with lines(console, clock) as on_event:
        on_event("start", {"solution": "slow_moe", "definition": "moe_fp8", "workloads": 2})
        clock.now += 2.0
        on_event("workload", {"label": "5e8dc11c", "uuid": "5e8dc11c-..."})
        clock.now += 150.5
        on_event("result", {"label": "5e8dc11c", "status": "PASSED", "message": ""})
        on_event("workload", {"label": "t8192_n57", "uuid": "x"})
        clock.now += 3.0
        on_event("result", {"label": "t8192_n57", "status": "COMPILE_ERROR",
                            "message": "importing kernel.py failed: No module named 'cutlass'\nTraceback ..."})
    text = buf.getvalue().splitlines()
    assert text == [
        "[    0.0 s] slow_moe [moe_fp8]: 2 workload(s)",
        "[    2.0 s]   5e8dc11c: started",
        "[  152.5 s]   5e8dc11c: PASSED after 150.5 s",
        "[  152.5 s]   t8192_n57: started",
        "[  155.5 s]   t8192_n57: COMPILE_ERROR after 3.0 s importing kernel.py failed: No module named 'cutlass'",
    ]


def test_lanes_keep_their_own_workload_clocks():
    buf, clock = io.StringIO(), Clock()
    with lines(Console(file=buf, force_terminal=False, width=200), clock) as on_event:
        on_event("workload", {"label": "a", "uuid": "a"})
        clock.now += 5.0

        def other_lane():
            on_event("workload", {"label": "b", "uuid": "b"})

        t = threading.Thread(target=other_lane, name="lane-1")
        t.start()
        t.join()
        clock.now += 1.0
        on_event("result", {"label": "a", "status": "PASSED", "message": None})
    assert buf.getvalue().splitlines()[-1].endswith("a: PASSED after 6.0 s")


def test_markup_in_names_is_printed_as_written():
    buf = io.StringIO()
    with lines(Console(file=buf, force_terminal=False, width=200), Clock()) as on_event:
        on_event("start", {"solution": "[bold red]x[/]", "definition": "d", "workloads": 1})
    assert "[bold red]x[/] [d]" in buf.getvalue()


def test_a_terminal_gets_bars_lines_are_asked_for_and_a_pipe_gets_nothing_by_default():
    terminal = Console(file=io.StringIO(), force_terminal=True)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    for mode in ("auto", "off"):  # a failure stays one line; piped output holds only what was asked for
        with submit_progress(pipe, mode) as on_event:
            on_event("start", {"solution": "s", "definition": "d", "workloads": 1})
    assert pipe.file.getvalue() == ""
    with submit_progress(pipe, "lines") as on_event:
        on_event("start", {"solution": "s", "definition": "d", "workloads": 1})
    assert "s [d]: 1 workload(s)" in pipe.file.getvalue()
    with submit_progress(terminal) as on_event:  # transient bars: nothing is left behind for a passing workload
        on_event("start", {"solution": "s", "definition": "d", "workloads": 1})
        on_event("workload", {"label": "w", "uuid": "w"})
        on_event("result", {"label": "w", "status": "PASSED", "message": ""})
    assert "workload(s)" not in terminal.file.getvalue()


def test_control_characters_in_a_candidate_s_message_are_shown_not_obeyed():
    from harness.cli_common import SafeConsole

    buf = io.StringIO()
    with lines(SafeConsole(file=buf, force_terminal=False, width=200), Clock()) as on_event:
        on_event("workload", {"label": "w", "uuid": "w"})
        on_event("result", {"label": "w", "status": "RUNTIME_ERROR", "message": "boom\x1b[2J\x1b[H cleared"})
    text = buf.getvalue()
    assert "\x1b" not in text and "\\x1b[2J" in text, text
