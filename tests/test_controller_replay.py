"""Replay: a recorded run's archived responses come back in order and give identical candidates."""

from __future__ import annotations

import json

from click.testing import CliRunner

from controller.cli import main
from controller.loop import run_loop
from controller.providers.replay import ReplayProvider
from controller.providers.scripted import ScriptedProvider
from harness.data.generation_request import Budget, GenerationRequest, Incumbent
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from support import KV8_PS1, TORCH_CANDIDATE
from loop_support import WORKLOAD, FakeEvaluator, config


def candidates(store: Store, run_id: str) -> list[tuple]:
    return [(c["round"], c["depth"], c["solution_name"], c["solution_hash"], c["status"])
            for c in store.candidates(run_id)]


def test_offline_run_replayed_through_the_harness_gives_identical_candidates(tiny_dataset_root, tmp_path):
    folder = tmp_path / "archive"
    recorded = run_loop(config(tiny_dataset_root, rounds=1, candidates=1), folder)
    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--provider", "replay", "--replay-run",
                                       recorded["run_id"], "--rounds", "1", "--candidates", "1", "--archive",
                                       str(folder), "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD,
                                       "--timeout-s", "120", "--json"])
    assert result.exit_code == 0, result.output
    replayed = json.loads(result.stdout)
    store = Store(Archive(folder))
    assert candidates(store, replayed["run_id"]) == candidates(store, recorded["run_id"])
    assert [r["statuses"] for r in replayed["rounds"]] == [r["statuses"] for r in recorded["rounds"]]
    original, again = store.responses_of_run(recorded["run_id"]), store.responses_of_run(replayed["run_id"])
    assert [store.raw_text(r) for r in again] == [store.raw_text(r) for r in original]
    assert again[0]["model"].startswith("replay of offline/offline-templates")
    assert replayed["provider"] == "replay" and replayed["totals"]["tokens"] == 0


def test_replay_follows_repairs_and_spend_is_not_counted_twice(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    archive = Archive(folder)
    dataset = Dataset(tiny_dataset_root)
    broken = {"files": [{"path": "kernel.py", "content": "def run(:\n"}], "entry_point": "kernel.py::run", "notes": ""}
    fixed = {"files": [{"path": "kernel.py", "content": TORCH_CANDIDATE}], "entry_point": "kernel.py::run",
             "notes": "fixed"}
    judge = lambda s: ("COMPILE_ERROR", None) if s is not None and "run(:" in s.sources[0].content else (  # noqa: E731
        "PASSED", None)
    recorded = run_loop(config(tiny_dataset_root, rounds=2), folder,
                        provider=ScriptedProvider([broken, fixed, fixed], tokens=(100, 50), cost_usd=0.5),
                        evaluator=FakeEvaluator(archive, dataset, [WORKLOAD], judge))
    store = Store(archive)
    replayed = run_loop(config(tiny_dataset_root, rounds=2, provider="replay"), folder,
                        provider=ReplayProvider(store, recorded["run_id"]),
                        evaluator=FakeEvaluator(archive, dataset, [WORKLOAD], judge))
    assert candidates(store, replayed["run_id"]) == candidates(store, recorded["run_id"])
    assert [c[4] for c in candidates(store, replayed["run_id"])] == ["PASSED", "COMPILE_ERROR", "PASSED", "DUPLICATE"]
    assert recorded["totals"]["cost_usd"] == 1.5 and replayed["totals"]["cost_usd"] == 0.0


def test_replay_out_of_step_or_exhausted_says_so(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    archive = Archive(folder)
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    reply = {"files": [{"path": "kernel.py", "content": "def run(*a): pass\n"}], "entry_point": "kernel.py::run",
             "notes": ""}
    recorded = run_loop(config(tiny_dataset_root, rounds=1), folder, provider=ScriptedProvider([reply]), evaluator=fake)
    store = Store(archive)
    provider = ReplayProvider(store, recorded["run_id"])
    inc = Incumbent(name="x", solution={})
    ahead = GenerationRequest(run_id="other", round=2, key="r2/explore", definition=KV8_PS1, incumbent=inc,
                              budget=Budget(max_candidates=1))
    assert "out of step" in provider.generate(ahead).error
    store.create_run("done", KV8_PS1, "replay", {})
    store.add_response(ahead.model_copy(update={"run_id": "done"}),
                       store.add_request(ahead.model_copy(update={"run_id": "done"})),
                       provider.generate(ahead), 0, None, {})
    assert "has no response #2" in provider.generate(ahead.model_copy(update={"run_id": "done"})).stopped
    assert "no earlier run" in ReplayProvider(store).generate(ahead.model_copy(
        update={"definition": "gqa_paged_decode_h32_kv4_d128_ps1"})).error
