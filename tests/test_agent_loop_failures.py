"""An API model that fails inside the controller's loop: every failed request is archived with its reason and the
run goes on (or ends cleanly when nothing came back); a refused key ends `controller loop` on one line, exit 2,
never printing the key; a model's or server's words are never read as console markup."""

from __future__ import annotations

import pytest

pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

from click.testing import CliRunner  # noqa: E402

from agent_sse import REPLY, Server, claude_stream  # noqa: E402
from controller import cli  # noqa: E402
from controller.loop import run_loop  # noqa: E402
from controller.providers.anthropic import AnthropicProvider  # noqa: E402
from controller.store import Store  # noqa: E402
from harness.archive.database import Archive  # noqa: E402
from harness.data.dataset import Dataset  # noqa: E402

from loop_support import WORKLOAD, FakeEvaluator, config  # noqa: E402
from support import KV8_PS1, TORCH_CANDIDATE  # noqa: E402

KEY = "sk-ant-api03-LOOPSECRETLOOPSECRET"


def provider(server: Server) -> AnthropicProvider:
    return AnthropicProvider(api_key=KEY, base_url="http://anthropic.test", http_client=server.client(),
                             max_retries=1)


def evaluator(folder, root) -> FakeEvaluator:
    return FakeEvaluator(Archive(folder), Dataset(root), [WORKLOAD], lambda s: ("PASSED", None))


def test_a_refused_key_ends_controller_loop_on_one_line_exit_2_without_the_key(tiny_dataset_root, tmp_path,
                                                                              monkeypatch):
    folder = tmp_path / "archive"
    folder.mkdir()
    server = Server(httpx2.Response(401, json={"type": "error", "error": {
        "type": "authentication_error", "message": f"invalid x-api-key {KEY} [see docs]"}}))
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setattr(cli, "_gpus_for", lambda *a: 0)
    monkeypatch.setattr(cli, "run_loops", lambda jobs, archive, gpus, on_event=None, **k: [
        run_loop(jobs[0], archive, provider=provider(server), evaluator=evaluator(archive, tiny_dataset_root),
                 on_event=on_event)])
    result = CliRunner().invoke(cli.main, ["loop", "-d", KV8_PS1, "--provider", "anthropic", "--archive", str(folder),
                                           "--dataset", str(tiny_dataset_root), "-w", WORKLOAD, "--rounds", "2"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "anthropic" in lines[0] and "HTTP 401" in lines[0]
    assert "[redacted]" in lines[0] and "[see docs]" in lines[0]  # brackets are text, not markup
    assert KEY not in result.output and "LOOPSECRET" not in result.output and len(server.bodies) == 1

    store = Store(Archive(folder))
    (run,) = store.runs()
    assert run["status"] == "FAILED" and "HTTP 401" in run["stop_reason"] and KEY not in run["stop_reason"]
    (turn,) = store.agent_turns(run["id"], "r1/explore")  # the failed call is archived with its reason
    assert turn["assistant"]["fatal"] and "HTTP 401" in turn["assistant"]["error"]


def test_failed_requests_are_each_rounds_recorded_reason_and_the_run_ends_cleanly(tiny_dataset_root, tmp_path):
    folder = tmp_path / "archive"
    too_long = httpx2.Response(400, json={"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}})
    refusal = claude_stream([("text", "I won't write that.")], stop="refusal")
    prose = claude_stream([("text", "Here is the kernel:\n```python\n" + TORCH_CANDIDATE + "```\n")], stop="end_turn")
    server = Server(too_long, refusal, prose)
    report = run_loop(config(tiny_dataset_root, rounds=3, candidates=1, repairs=0), folder,
                      provider=provider(server), evaluator=evaluator(folder, tiny_dataset_root))
    assert report["status"] == "DONE" and len(server.bodies) == 3
    stopped = {r["round"]: r["stopped"] for r in report["rounds"]}
    assert "prompt is too long" in stopped[1][0] and stopped[2] == ["the model refused: I won't write that."]
    assert "without calling submit_kernel" in stopped[3][0]  # the kernel in its prose was submitted for it
    assert report["rounds"][3]["candidates"] == 1 and report["nothing_produced"] is None
    from controller.trajectory import trajectory_markdown

    table = trajectory_markdown(report)  # what `controller trajectory` prints: each empty round says why
    assert "no candidate: HTTP 400" in table and "no candidate: the model refused: I won't write that." in table


def test_a_request_that_hangs_is_cut_at_its_wall_time_and_the_loop_goes_on(tiny_dataset_root, tmp_path):
    import time

    def hang(req):
        time.sleep(5)
        return claude_stream([("tool", "tu_1", "submit_kernel", REPLY)])

    folder = tmp_path / "archive"
    server = Server(hang)
    started = time.monotonic()
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, repairs=0, request_wall_s=1.0), folder,
                      provider=provider(server), evaluator=evaluator(folder, tiny_dataset_root))
    assert time.monotonic() - started < 4.5 and report["status"] == "DONE"
    assert report["rounds"][1]["stopped"][0].startswith("wall time")
    assert report["nothing_produced"].startswith("no round produced a candidate: wall time")


def test_a_provider_that_raises_costs_its_request_on_one_line_without_a_credential(tiny_dataset_root, tmp_path):
    class Broken:
        name, model = "broken", "broken-1"
        calls = 0

        def generate(self, request):
            Broken.calls += 1
            raise RuntimeError(f"SDK surprise\n  at line 3\nheaders: x-api-key={KEY}")

    folder = tmp_path / "archive"
    report = run_loop(config(tiny_dataset_root, rounds=2, candidates=1, repairs=0), folder, provider=Broken(),
                      evaluator=evaluator(folder, tiny_dataset_root))
    assert report["status"] == "DONE" and Broken.calls == 2  # the run went on to its second round
    (error,) = report["rounds"][1]["stopped"]
    assert error.startswith("RuntimeError: SDK surprise at line 3") and "\n" not in error and KEY not in error
