"""skills/promotion-rules 4c (`pair_changed_only`): a paired measurement times only the workloads whose code differs
between two dispatching solutions; the identical ones count 1x. Which regimes are identical is read from the
solutions' own files (controller/dispatch.py regime_code), never from what the controller meant to change."""

from __future__ import annotations

import copy

import pytest

from controller.dispatch import splice, unchanged_regimes
from controller.promote import PROMOTED, REJECTED, EvalRecord, PairedMeasurement, PairedSample, decide
from controller.skills import PromotionThresholds

from support import KV8_PS1, ROOT

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def rendered():
    """(seed dispatch, a splice of its latency-bound kernel with CHUNK_BLOCKS 32, a render function)."""
    from controller.providers.offline import OfflineProvider, naive_incumbent
    from controller.skills import load_skills

    skills = load_skills(ROOT / "skills")
    generator = OfflineProvider(skills).generator_for(KV8_PS1)
    origin = generator.seed_dispatch([], naive_incumbent(skills, KV8_PS1).origin)
    variant = copy.deepcopy(origin["params"]["variants"]["latency-bound"])
    variant["params"]["CHUNK_BLOCKS"] = 32
    spliced = splice(origin, "latency-bound", variant)

    def render(o, name):
        solution = generator.render_dispatch(o, KV8_PS1, name, "controller/offline", "H200")
        return solution["spec"], {s["path"]: s["content"] for s in solution["sources"]}

    return render(origin, "seed"), render(spliced, "spliced"), render


def test_a_spliced_candidate_changes_only_its_regime(rendered):
    seed, spliced, _ = rendered
    assert unchanged_regimes(seed, spliced) == {"memory-bound", "skewed"}
    assert unchanged_regimes(seed, seed) == {"latency-bound", "memory-bound", "skewed"}


def edited(solution, path, change):
    spec, files = copy.deepcopy(solution)
    if path is None:
        change(spec, files)
    else:
        files[path] = change(files[path])
    return spec, files


@pytest.mark.parametrize("what, edit", [
    ("another regime function", lambda s: edited(s, "regime.py", lambda t: t + "\n# edited\n")),
    ("a hand-edited dispatcher",
     lambda s: edited(s, "dispatch.py", lambda t: t.replace("own(*inputs)", "own(*inputs[:])"))),
    ("a helper module beside the kernels", lambda s: edited(s, None, lambda spec, files: files.update(
        {"helpers.py": "X = 1\n"}))),
    ("another spec", lambda s: edited(s, None, lambda spec, files: spec.update({"dependencies": ["numpy"]}))),
    ("a dispatcher that does not parse", lambda s: edited(s, "dispatch.py", lambda t: t + "\ndef (:\n")),
    ("not a dispatcher",
     lambda s: edited(s, None, lambda spec, files: spec.update({"entry_point": "kernel_0.py::run"}))),
])
def test_any_difference_outside_the_kernel_modules_means_every_regime_is_timed(rendered, what, edit):
    seed, _, _ = rendered
    assert unchanged_regimes(seed, edit(seed)) == set(), what
    assert unchanged_regimes(edit(seed), seed) == set(), what


@pytest.mark.parametrize("line", [
    "from .kernel_1 import run as _other",  # a relative import of a sibling module
    "import importlib",                      # code loaded by name at run time
    "_src = open(__file__).read()",          # code read at run time
    "from regime import regime as _r",       # a sibling by its plain name
])
def test_a_kernel_that_may_run_code_outside_its_file_means_every_regime_is_timed(rendered, line):
    """The same kernel file in both solutions is the same code only if the file is all the code it runs: a kernel that
    imports a sibling (whose text may differ) or loads code at run time is not compared, in either solution."""
    seed, _, _ = rendered
    module = next(f for f in seed[1] if f.startswith("kernel_"))
    both = edited(seed, module, lambda t: t + "\n" + line + "\n")
    assert unchanged_regimes(both, both) == set()


def test_a_kernel_module_edited_changes_the_regimes_that_run_it(rendered):
    seed, _, _ = rendered
    spec, files = seed
    module = next(line for line in files["dispatch.py"].splitlines() if line.startswith("MODULES = "))
    skewed_module = module.split("'skewed': ")[1].split("}")[0].split(",")[0]
    changed = edited(seed, f"{skewed_module}.py", lambda t: t + "\n# tuned\n")
    assert unchanged_regimes(seed, changed) == {"latency-bound", "memory-bound"}


# -- the decision over a measurement that left the unchanged workloads out ------------------------------------------

TH = PromotionThresholds(require_all_workloads_passed=True, require_clean_audits=True, require_full_audit=True,
                         min_repeats=2, noise_floor_rel=0.02, paired_order="ABBA", max_regime_regression_rel=0.05,
                         max_workload_regression_rel=0.05, stop_no_improvement_rounds=3, stop_at_fraction_of_floor=0.9,
                         pair_changed_only=True)
CLEAN = ({"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},)
RECORDS = [EvalRecord(workload=w, status="PASSED", audits=CLEAN, label=w) for w in ("b1", "b16", "b64", "b256")]


def paired_on(a: dict, b: dict) -> PairedMeasurement:
    return PairedMeasurement("ABBA", tuple(PairedSample(role, r, a if role == "A" else b)
                                           for r in range(2) for role in "ABBA"))


@pytest.mark.parametrize("a, b, unchanged, verdict, rule, mean", [
    # b1 and b16 timed (1.25x and 1.0x), b64 and b256 the same code: (1.25 + 1 + 1 + 1) / 4
    ({"b1": 1.0, "b16": 1.0}, {"b1": 0.8, "b16": 1.0}, {"b64", "b256"}, PROMOTED, "promoted", 1.0625),
    # the same measurement without the declaration: b64 and b256 have no paired latency
    ({"b1": 1.0, "b16": 1.0}, {"b1": 0.8, "b16": 1.0}, set(), REJECTED, "timing", None),
    # a workload said unchanged but timed anyway keeps its measurement
    ({"b1": 1.0, "b16": 1.0, "b64": 1.0}, {"b1": 0.8, "b16": 1.0, "b64": 1.25}, {"b64", "b256"}, REJECTED,
     "noise_floor", 1.0125),
    # a changed workload left out is no timing, whatever else was measured
    ({"b1": 1.0}, {"b1": 0.8}, {"b64", "b256"}, REJECTED, "timing", None),
])
def test_unchanged_workloads_count_one(a, b, unchanged, verdict, rule, mean):
    decision = decide(RECORDS, paired_on(a, b), TH, None, None, None, unchanged)
    assert (decision.verdict, decision.rule) == (verdict, rule), decision.reasons
    if mean is not None:
        assert decision.details["mean_speedup"] == pytest.approx(mean)
    if decision.promoted:
        assert decision.details["unchanged_not_timed"] == ["b64", "b256"]
        assert "2 workload(s) run the incumbent's code unchanged: 1x, not re-timed" in decision.reasons[0]


def test_the_harness_evaluator_times_only_the_workloads_asked_for(tiny_dataset_root, tmp_path):
    from types import SimpleNamespace

    from controller.evaluator import HarnessEvaluator
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import SubmitOptions

    seen = []

    class GpuSession:
        has_gpu = True
        options = SubmitOptions(workloads=["all"])

        def submit(self, solution, audit_level=None):
            seen.append(list(self.options.workloads))
            w = SimpleNamespace(workload="w1", evaluated=True, latency_ms=1.0)
            return SimpleNamespace(timing_unavailable_reason=None, all_passed=True, workloads=[w], submission_id=1)

    evaluator = HarnessEvaluator(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions())
    evaluator._session = GpuSession()
    evaluator.measure_paired("inc", "cand", repeats=2, order="ABBA", workloads=["w1", "w2"])
    assert seen == [["w1", "w2"]] * 8 and GpuSession.options.workloads == ["all"]  # restored after
    evaluator.measure_paired("inc", "cand", repeats=1, order="AB")
    assert seen[-2:] == [["all"], ["all"]]


def test_the_round_leaves_out_the_workloads_of_unchanged_regimes_but_never_all(rendered):
    """RoundEvaluation.unchanged_workloads: the workloads whose regime (the harness's, as the loop groups them) runs
    the same code in both; a candidate the same everywhere is timed in full (the rules measure what they decide);
    with `pair_changed_only` off, nothing is left out."""
    from types import SimpleNamespace

    from controller.screening import RoundEvaluation
    from harness.data.schema import Solution

    seed, spliced, _ = rendered

    def solution(pair, name):
        spec, files = pair
        return Solution.model_validate({"name": name, "definition": KV8_PS1, "author": "t", "spec": spec,
                                        "sources": [{"path": p, "content": c} for p, c in files.items()]})

    solutions = {"inc": solution(seed, "inc"), "cand": solution(spliced, "cand"), "same": solution(seed, "same")}

    class Probe(RoundEvaluation):
        def __init__(self, thresholds):
            self.thresholds = thresholds
            self.store = SimpleNamespace(solution=lambda c: solutions[c["name"]])
            self.workloads = [SimpleNamespace(uuid=u) for u in ("b1", "b16", "b256", "skewed")]
            self.regimes = {"b1": "latency-bound", "b16": "latency-bound", "b256": "memory-bound", "skewed": "skewed"}

    probe = Probe(TH)
    assert probe.unchanged_workloads({"name": "cand"}, {"name": "inc"}) == {"b256", "skewed"}
    assert probe.unchanged_workloads({"name": "same"}, {"name": "inc"}) == set()
    off = Probe(TH.model_copy(update={"pair_changed_only": False}))
    assert off.unchanged_workloads({"name": "cand"}, {"name": "inc"}) == set()
