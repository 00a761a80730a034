"""The loop over several definitions, several GPUs: lanes side by side, one failing lane, the CLI over an alias,
run_lanes handing out work, definitions from names and aliases, and a signal stopping every lane."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli import main
from harness.data.schema import SchemaError

from support import ROOT

from loop_support import config


# -- several definitions, several GPUs ------------------------------------------------------------------------


def test_several_definitions_run_side_by_side_one_gpu_each(tiny_dataset_root, tmp_path):
    """run_loops: with 2 GPUs, two lanes run at once (a barrier proves it), each on its own device index;
    reports come back in the order of the configs. With one GPU (or none) they run one after the other."""
    import threading

    from controller.loop import run_loops

    configs = [config(tiny_dataset_root, definition=d) for d in ("d1", "d2", "d3")]
    both_lanes_running = threading.Barrier(2, timeout=10)
    calls = []

    def runner(cfg, archive_path, on_event=None, device_index=None):
        calls.append((cfg.definition, device_index))
        if len(calls) <= 2:
            both_lanes_running.wait()  # would time out (BrokenBarrierError) if the lanes ran one by one
        return {"definition": cfg.definition}

    reports = run_loops(configs, tmp_path, gpus=2, runner=runner)
    assert [r["definition"] for r in reports] == ["d1", "d2", "d3"]
    assert {d for _, d in calls} == {0, 1} and sorted(c for c, _ in calls) == ["d1", "d2", "d3"]

    calls.clear()
    sequential = run_loops(configs, tmp_path, gpus=1, runner=lambda cfg, a, on_event=None: calls.append(cfg.definition)
                           or {"definition": cfg.definition})
    assert calls == ["d1", "d2", "d3"] and [r["definition"] for r in sequential] == calls


def test_a_failing_lane_raises_after_the_others_stop(tiny_dataset_root, tmp_path):
    from controller.loop import run_loops

    configs = [config(tiny_dataset_root, definition=d) for d in ("d1", "d2")]

    def runner(cfg, archive_path, on_event=None, device_index=None):
        on_event("run", {"run_id": cfg.definition})
        if cfg.definition == "d2":
            raise ValueError("d2 broke")
        return {"definition": cfg.definition}

    events = []
    with pytest.raises(ValueError, match="d2 broke"):
        run_loops(configs, tmp_path, gpus=2, runner=runner, on_event=lambda kind, data: events.append((kind, data)))
    # Each event says whose it is (the lanes interleave), and the failure is said when it happens.
    assert sorted((d["lane"], d["run_id"]) for k, d in events if k == "run") == [("d1", "d1"), ("d2", "d2")]
    assert [(k, d) for k, d in events if k == "lane_error"] == [("lane_error", {"error": "ValueError: d2 broke",
                                                                                "lane": "d2"})]


def test_cli_loop_over_an_alias_runs_each_definition(tmp_path, monkeypatch):
    """`controller loop --definition gqa_decode`: the alias's four definitions, one run each (on this CPU host
    one after the other: the GPU probe finds none); round 0 only, one small workload, to stay quick."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(main, ["loop", "--definition", "gqa_decode", "--rounds", "0", "--archive", str(archive),
                                       "--dataset", str(ROOT / "definitions"), "--workloads", "uniform_b1_kv512",
                                       "--no-profile", "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert sorted(r["definition"] for r in reports) == ["gqa_paged_decode_h32_kv4_d128_ps1",
                                                        "gqa_paged_decode_h32_kv4_d128_ps64",
                                                        "gqa_paged_decode_h32_kv8_d128_ps1",
                                                        "gqa_paged_decode_h32_kv8_d128_ps64"]
    assert all(r["status"] == "DONE" and len(r["rounds"]) == 1 for r in reports)


def test_run_lanes_hands_out_each_item_once_and_stops_taking_after_an_error():
    import threading

    from harness.pipeline.parallel import run_lanes

    seen, lock = [], threading.Lock()

    def serve(lane, take):
        while (item := take()) is not None:
            with lock:
                seen.append(item[1])

    run_lanes(list(range(20)), 3, serve)
    assert sorted(seen) == list(range(20))  # every item once, whichever lane took it

    taken = []

    def failing(lane, take):
        while (item := take()) is not None:
            taken.append(item[1])
            raise RuntimeError(f"lane {lane} broke")

    with pytest.raises(RuntimeError, match="broke"):
        run_lanes(list(range(20)), 1, failing)
    assert taken == [0]  # one lane, inline: nothing more is taken after the failure


def test_definitions_from_names_and_aliases_each_once_in_order():
    """--definition takes names and aliases, repeated or comma-separated: each definition once, in the order given."""
    from controller.cli import _definitions

    dataset = str(ROOT / "definitions")
    names = _definitions(("gqa_paged_decode_h32_kv8_d128_ps64, gqa_decode", "gqa_paged_decode_h32_kv4_d128_ps1"),
                         dataset)
    assert names[0] == "gqa_paged_decode_h32_kv8_d128_ps64" and len(names) == len(set(names)) == 4
    assert set(names) == {"gqa_paged_decode_h32_kv4_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps64",
                          "gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv8_d128_ps64"}
    with pytest.raises(SchemaError, match="unknown definition 'gqa_nope'"):
        _definitions(("gqa_decode,gqa_nope",), dataset)


class Stop(BaseException):
    """Stands for SIGTERM's SystemExit in the thread that waits for the lanes."""


@pytest.mark.parametrize("to", ["main", "other"])
def test_a_signal_while_lanes_run_stops_every_lane_promptly_and_runs_their_cleanup(to):
    """`timeout` ending `controller loop -d gqa_decode` on a multi-GPU host: the signal's handler runs in the main
    thread only; every lane must stop too (one of them blocked reading a worker's reply) and run its finally
    blocks, or the process would live on until each lane's whole run was done.

    The kernel hands a process-directed signal to any thread that does not block it: sent to another thread
    ("other"), it cannot cut short the main thread's wait for the lanes, so only a wait in slices lets the
    handler run (a wait with no timeout held it until the reader's deadline). Sent to the main thread ("main"),
    it could land just before that wait began, with the same effect, now and then."""
    import os
    import signal
    import sys
    import threading
    import time

    from harness.sandbox import protocol
    from harness.pipeline.parallel import run_lanes

    read_fd, write_fd = os.pipe()  # a worker that never answers
    started = threading.Barrier(3, timeout=10)
    cleaned = []

    def serve(lane, take):
        take()
        try:
            started.wait()
            if lane == 0:
                protocol.read_message(read_fd, time.monotonic() + 30)
            while True:
                time.sleep(0.01)
        finally:
            cleaned.append(lane)

    def main_waits_for_the_lanes():
        frame, names = sys._current_frames().get(threading.main_thread().ident), []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return "run_lanes" in names and "start" not in names and names[:2] == ["wait", "wait"]  # Event's, Condition's

    def send_signal():
        started.wait()
        if to == "main":  # at once: the main thread may still be starting the lanes
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            return
        deadline = time.monotonic() + 10
        while not main_waits_for_the_lanes() and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.1)  # well inside its lock wait, not between bytecodes on the way there
        signal.pthread_kill(threading.current_thread().ident, signal.SIGUSR1)

    def stop(signum, frame):
        raise Stop()

    previous = signal.signal(signal.SIGUSR1, stop)
    sender = threading.Thread(target=send_signal)
    sender.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(Stop):
            run_lanes(list(range(5)), 2, serve)
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
        os.close(read_fd)
        os.close(write_fd)
    assert sorted(cleaned) == [0, 1]
    assert time.monotonic() - t0 < 10  # not the reader's 30 s deadline
