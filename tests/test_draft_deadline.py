"""A tool conversation's draft evaluation is cut at its request's wall time: the seconds the request has left flow
from the ToolBox through the controller's evaluator (local or Ray lane) into the harness, whose candidate worker is
killed there with its sandbox (nothing it started survives), and the draft's result says so as a TIMEOUT, the
workloads after it SKIPPED; never a hang past the budget, never a traceback."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.agent.context import bind_provider
from controller.agent.scripted import ScriptedChat
from controller.agent.tool_loop import MemoryJournal, run_tool_loop
from controller.agent.tools import ToolBox
from controller.agent.transcript import AssistantTurn, ToolCall
from controller.evaluator import HarnessEvaluator
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.generation_request import Budget, Constraints, GenerationRequest, Incumbent
from harness.data.schema import Solution
from harness.pipeline.evaluate import SubmitOptions

from sandbox_attacks import hostile_solution, outcomes

WORKLOADS = ["tiny_b2_t40", "tiny_b3_t96"]
BUDGET_SAID = "the evaluation's wall-time budget"


def sleeper(marker: str) -> dict:
    """A draft whose kernel leaves two sleeping children (one in a session of its own), then sleeps itself."""
    source = hostile_solution("sleeper", ["fork_sleeper", "setsid_sleeper"], marker=marker)
    kernel = source["sources"][0]["content"]
    source["sources"][0]["content"] = kernel.replace("    _hostile()\n",
                                                     "    _hostile()\n    import time as _t; _t.sleep(600)\n")
    return source


def marked_processes(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (the sleepers the draft left), as tests/test_sandbox.py finds
    them."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            pass
    return pids


def gone(marker: str, within_s: float = 10.0) -> bool:
    """The kernel ends a dead namespace's processes asynchronously: give it a moment."""
    deadline = time.monotonic() + within_s
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked_processes(marker) == []


def request(solution: dict, wall_s: float, max_evaluations: int = 2) -> GenerationRequest:
    return GenerationRequest(run_id="run-deadline", round=1, key="r1/explore", definition=solution["definition"],
                             incumbent=Incumbent(name="inc", solution=solution),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             budget=Budget(max_candidates=1, max_output_tokens=4096, wall_s=wall_s,
                                           max_evaluations=max_evaluations))


def evaluate_call(solution: dict, workloads: list[str], call_id: str = "e0") -> ToolCall:
    return ToolCall(id=call_id, name="evaluate", arguments={"files": solution["sources"], "workloads": workloads})


# -- the seconds left, from the request to the harness (no worker) ------------------------------------------------


@pytest.mark.parametrize("wall_s, cost_s, evaluations, told", [
    (150.0, 100.0, 3, [150.0, 50.0]),  # the second starts with 50 s left; the third would start past the wall time
    (300.0, 60.0, 3, [300.0, 240.0, 180.0]),
    (30.0, 0.0, 2, [30.0, 30.0]),
])
def test_each_draft_is_told_what_its_request_has_left(wall_s, cost_s, evaluations, told):
    now, seen = [0.0], []

    def evaluate(solution, workloads, budget_s):
        seen.append(budget_s)
        now[0] += cost_s
        return "PASSED"

    draft = sleeper("crucible-unused")
    req = request(draft, wall_s, max_evaluations=evaluations)
    calls = [evaluate_call(draft, [], f"e{i}") for i in range(evaluations)]
    run_tool_loop(req, ScriptedChat([AssistantTurn(tool_calls=calls)]), ToolBox(req, {}, "scripted", evaluate=evaluate),
                  MemoryJournal(), (3.0, 15.0), clock=lambda: now[0])
    assert seen == pytest.approx(told)


def test_a_toolbox_without_a_deadline_sets_no_budget():
    seen = []
    draft = sleeper("crucible-unused")
    box = ToolBox(request(draft, 60.0), {}, "scripted", evaluate=lambda s, w, b: seen.append(b) or "PASSED")
    assert not box.call(evaluate_call(draft, [])).is_error and seen == [None]


class _Session:
    def __init__(self):
        self.calls, self.options = [], SimpleNamespace(workloads=None)

    def submit(self, solution, **kwargs):
        self.calls.append(kwargs)
        return SimpleNamespace(submission_id=7)


@pytest.mark.parametrize("budget_s, passed", [(12.5, {"budget_s": 12.5}), (None, {})])
def test_the_evaluator_hands_the_budget_to_the_harness_session(budget_s, passed):
    evaluator = HarnessEvaluator(None, None, SubmitOptions())
    evaluator._session = session = _Session()
    assert evaluator.evaluate_on(Solution.model_validate(sleeper("m")), None, budget_s) == 7
    assert session.calls == [passed]  # a full evaluation (evaluate_full) keeps its per-workload limits alone


@pytest.mark.parametrize("budget_s, lane_start_s, sent", [(30.0, 0.0, 30.0), (30.0, 12.0, 18.0), (30.0, 45.0, 0.0),
                                                         (None, 5.0, None)])
def test_a_ray_lane_is_sent_the_seconds_left_after_its_start(monkeypatch, budget_s, lane_start_s, sent):
    ray_executor = pytest.importorskip("harness.pipeline.ray_executor")
    from harness.data.results import SubmissionResult

    now, remote = [100.0], []
    monkeypatch.setattr(ray_executor, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(ray_executor.ray, "get", lambda ref, **kw: ref)
    monkeypatch.setattr(ray_executor, "_archive_payload", lambda archive, payload, solution, record: SubmissionResult(
        3, solution.name, solution.definition, "TIMEOUT", []))
    client = object.__new__(ray_executor.LaneClient)
    client.archive, client.options = None, SubmitOptions(workloads=["tiny_b2_t40"])
    client.settings, client.progress = ray_executor.RaySettings(retries=0), lambda kind, data: None
    handle = SimpleNamespace(evaluate=SimpleNamespace(remote=lambda *args: remote.append(args) or {}))

    def lane():
        now[0] += lane_start_s
        return ray_executor._LaneState("lane0", handle, {"host": "here"})

    client.lane = lane
    result = client.submit(Solution.model_validate(sleeper("m")), budget_s=budget_s)
    assert result.submission_id == 3 and len(remote) == 1
    assert remote[0][1:] == (None, ["tiny_b2_t40"], sent)

    # and the lane hands it to its own session, on its own clock
    submitted = []
    lane_actor = object.__new__(ray_executor.Lane)
    lane_actor.session = SimpleNamespace(options=SimpleNamespace(workloads=None), submit=lambda solution, **kw: (
        submitted.append(kw) or SimpleNamespace(submission_id=None)))
    lane_actor._last_submission = lambda: 0
    lane_actor.evaluate(Solution.model_validate(sleeper("m")), None, ["tiny_b2_t40"], sent)
    assert submitted == [{"audit_level": None, "budget_s": sent}]


# -- the harness's worker cut at the deadline (real sandboxed workers) --------------------------------------------


@pytest.fixture(scope="module")
def warm_evaluator(tiny_dataset_root, tmp_path_factory):
    """The controller's evaluator with its harness session warm (the reference's worker up, as after a run's first
    evaluation), so a draft's budget is spent on the draft; per-workload limit 60 s, far past every budget here."""
    archive = Archive(tmp_path_factory.mktemp("deadline") / "archive")
    evaluator = HarnessEvaluator(Dataset(tiny_dataset_root), archive,
                                 SubmitOptions(workloads=WORKLOADS, timeout_s=60, baselines=False, spare_worker=True))
    evaluator.session.reference_worker()
    yield evaluator, Store(archive)
    evaluator.close()


class _Provider:
    def bind(self, **context):
        self.context = context


def test_a_hanging_draft_is_stopped_at_the_requests_wall_time(warm_evaluator):
    evaluator, store = warm_evaluator
    marker = "crucible-marker-" + uuid.uuid4().hex
    draft = sleeper(marker)
    provider = _Provider()
    bind_provider(provider, {}, store, evaluator, WORKLOADS)
    wall_s = 8.0
    req = request(draft, wall_s)
    journal = MemoryJournal()
    started = time.monotonic()
    response = run_tool_loop(req, ScriptedChat([AssistantTurn(tool_calls=[evaluate_call(draft, [])])]),
                             ToolBox(req, {}, "scripted", evaluate=provider.context["evaluate"]), journal,
                             (3.0, 15.0))
    took = time.monotonic() - started
    assert took < wall_s + 6, f"the draft ran {took:.1f} s past a {wall_s:g} s request"
    result = journal.turns(req)[0].results[0]
    assert not result.is_error, result.content  # the model reads a result, not a tool failure
    assert "0 of 2 workloads PASSED" in result.content
    rows = {line.split("|")[1].strip(): line for line in result.content.splitlines() if line.startswith("| tiny")}
    assert "| TIMEOUT |" in rows["tiny_b2_t40"] and BUDGET_SAID in rows["tiny_b2_t40"]
    assert "its worker was stopped" in rows["tiny_b2_t40"]
    assert "| SKIPPED |" in rows["tiny_b3_t96"] and f"not run: {BUDGET_SAID}" in rows["tiny_b3_t96"]
    assert response.stopped.startswith("wall time")
    # archived as the model read it; the kernel ran and left its sleepers, and the killed sandbox took them along
    archive = evaluator.archive
    submission = archive.submission(archive.submissions(limit=1)[0]["id"])
    assert submission["status"] == "TIMEOUT" and submission["solution_name"].startswith("draft0_")
    first = submission["evaluations"][0]
    assert first["status"] == "TIMEOUT" and BUDGET_SAID in first["message"]
    log = archive.get_blob(first["log_blob"]).decode()
    assert "ESCAPED fork_sleeper" in log and "ESCAPED setsid_sleeper" in log  # left sleeping, in the sandbox
    assert gone(marker)


def test_a_spent_budget_runs_nothing_and_says_why(warm_evaluator):
    evaluator, store = warm_evaluator
    marker = "crucible-marker-" + uuid.uuid4().hex
    started = time.monotonic()
    result = evaluator.session.submit(Solution.model_validate(sleeper(marker)), budget_s=0.0)
    assert time.monotonic() - started < 5
    assert result.status == "SKIPPED" and [w.status for w in result.workloads] == ["SKIPPED", "SKIPPED"]
    assert all(w.message.startswith(f"not run: {BUDGET_SAID}") for w in result.workloads)
    assert marked_processes(marker) == []


def test_a_budget_longer_than_the_workload_limit_leaves_the_limit_to_speak(warm_evaluator):
    evaluator, _ = warm_evaluator
    session = evaluator.session
    marker = "crucible-marker-" + uuid.uuid4().hex
    saved = session.options.timeout_s, session.options.workloads
    session.options.timeout_s, session.options.workloads = 4, WORKLOADS[:1]
    try:
        result = session.submit(Solution.model_validate(sleeper(marker)), budget_s=120.0)
    finally:
        session.options.timeout_s, session.options.workloads = saved
    (wr,) = result.workloads
    assert wr.status == "TIMEOUT" and "limit 4 s per workload" in wr.message and BUDGET_SAID not in wr.message
    assert outcomes(wr.log)["fork_sleeper"].startswith("ESCAPED")  # it ran (and the limit's kill took it along)
    assert gone(marker)
