"""benchmarks/template_sweep.py: templates rendered as the loop renders them, results read and scored (pure part)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import template_sweep as ts  # noqa: E402
from harness.data.schema import Solution  # noqa: E402

KV4 = "gqa_paged_decode_h32_kv4_d128_ps64"


def test_every_template_renders_a_valid_solution_with_the_definitions_own_page_size(tmp_path):
    configs = [*ts.DEFAULT_CONFIGS, {"template": "triton-split-kv", "SPLIT_KV": 8, "BLOCK_N": 999},
               {"template": "no-such-template"}]
    rendered = ts.render_all(configs, KV4, tmp_path)
    # a value the template does not allow is not timed as the default under the asked-for name: skipped, as is a
    # template the definition is not offered
    assert [r["template"] for r in rendered] == [c["template"] for c in configs[:4]]
    for r in rendered:
        sol = Solution.model_validate_json((tmp_path / f"{r['solution']}.json").read_text())
        assert sol.definition == KV4 and "PAGE_SIZE" not in r["params"]
        assert "64" in sol.sources[0].content  # the definition fixed the page size


def workload(label, status="PASSED", mine=0.010, kernel=None, fi=0.012, floor=0.004, audits=()):
    speed = None if fi is None else fi / (kernel or mine)
    return {"label": label, "status": status, "latency_ms": mine, "kernel_latency_ms": kernel,
            "flashinfer_kernel_ms": fi, "speedup_vs_flashinfer_kernel": speed, "floor_ms": floor,
            "fraction_of_floor": floor / (kernel or mine), "message": None,
            "audits": [{"name": a, "passed": False, "detail": ""} for a in audits]}


def test_results_are_read_one_object_after_another_and_scored_against_flashinfer():
    a = {"solution": "a", "status": "PASSED", "promotable": True,
         "workloads": [workload("b1", mine=0.020, kernel=0.008), workload("b64", mine=0.030, fi=0.024)]}
    b = {"solution": "b", "status": "FAILED", "promotable": False, "promotion_blockers": ["x"],
         "workloads": [workload("b1", status="INCORRECT_NUMERICAL", fi=0.5), workload("b64", fi=None)]}
    parsed = ts.parse_results(json.dumps(a, indent=2) + "\n" + json.dumps(b) + "\n")
    assert [p["solution"] for p in parsed] == ["a", "b"]
    first = ts.summarise(parsed[0])
    # the kernel figure where there is one (setup outside the timed call), as FlashInfer's is measured
    assert first["workloads"][0]["kernel_us"] == pytest.approx(8.0)
    assert first["score"] == pytest.approx((1.5 + 0.8) / 2) and first["worst"] == pytest.approx(0.8)
    assert (first["at_least_1x"], first["timed"]) == (1, 2)
    second = ts.summarise(parsed[1])  # a wrong result never counts, nor a workload without FlashInfer's figure
    assert second["score"] is None and second["timed"] == 0 and second["blockers"] == ["x"]
    assert "| b1 | PASSED | 8 | 12 | 1.5x |" in ts.markdown([{"definition": KV4, "template": "t", "params": {},
                                                              **first}])


def test_definitions_are_names_or_the_datasets_aliases():
    from harness.data.dataset import Dataset
    from harness.data.schema import SchemaError

    dataset = Dataset(None)
    assert ts.definitions_for("gqa_decode", dataset) == dataset.aliases["gqa_decode"]
    assert ts.definitions_for(f"{KV4},,moe", dataset) == [KV4, *dataset.aliases["moe"]]
    with pytest.raises(SchemaError, match="unknown definition 'nope'"):
        ts.definitions_for("nope", dataset)


GQA_DECODE = ["gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv8_d128_ps64",
              "gqa_paged_decode_h32_kv4_d128_ps1", KV4]


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "configs").glob("*.json")), ids=lambda p: p.stem)
def test_the_shipped_sweep_configurations_render_as_written_for_every_definition(tmp_path, path):
    """A value the template does not allow would silently become its default (the sweep would measure something
    else than its name says): every configuration renders with exactly the values it asks for on the definitions
    it names (all four where it names none), or, where the definition narrows a placeholder (KV_LOAD 2, TMA boxes,
    at page size 1), is skipped there."""
    configs = json.loads(path.read_text())
    for definition in GQA_DECODE:
        (tmp_path / definition).mkdir()
        rendered = ts.render_all(configs, definition, tmp_path / definition)
        kept = [c for c in configs if definition in c.get("definitions", GQA_DECODE)
                and not (definition.endswith("_ps1") and c.get("KV_LOAD") == 2)]
        assert len(rendered) == len(kept)
        for config, r in zip(kept, rendered):
            if config["template"] == "dispatch":
                for regime, asked in (config.get("variants") or {}).items():  # none: the round-1 dispatch
                    variant = r["params"]["variants"][regime]
                    assert variant["template"] == asked.get("template", variant["template"])  # a switched design
                    asked = {k: v for k, v in asked.items() if k != "template"}
                    assert {k: variant["params"][k] for k in asked} == asked
                continue
            asked = {k: v for k, v in config.items() if k not in ("template", "why", "definitions")}
            assert {k: r["params"][k] for k in asked} == asked


def test_a_dispatch_configuration_is_the_skills_round_one_dispatch_with_the_regimes_it_changes(tmp_path, capsys):
    """What a promotion would judge: the offline provider's seed dispatch (the skill's starting point per regime),
    only the named regimes' kernels changed, each change checked as a kernel's own configuration would be."""
    from controller.providers.offline import OfflineProvider, naive_incumbent
    from controller.skills import load_skills

    skills = load_skills(ROOT / "skills")
    seed = OfflineProvider(skills).generator_for(KV4).seed_dispatch([], naive_incumbent(skills, KV4).origin)
    change = {"KV_LOAD": 1, "CHUNK_BLOCKS": 64}  # neither is the definition's own start
    configs = [{"template": "dispatch", "variants": {}},
               {"template": "dispatch", "variants": {"latency-bound": change}, "definitions": [KV4]},
               {"template": "dispatch", "variants": {"latency-bound": change},
                "definitions": ["gqa_paged_decode_h32_kv8_d128_ps1"]},
               {"template": "dispatch", "variants": {"latency-bound": {"template": "triton-per-kv-head"}}},
               {"template": "dispatch", "variants": {"latency-bound": {"KV_LOAD": 7}}},
               {"template": "dispatch", "variants": {"prefill": {}}}]
    rendered = ts.render_all(configs, KV4, tmp_path)
    assert [r["solution"].split("_")[0] for r in rendered] == ["sweep0", "sweep1", "sweep3"]
    assert rendered[0]["params"] == seed["params"]
    changed = rendered[1]["params"]["variants"]
    assert changed["latency-bound"]["params"] == {**seed["params"]["variants"]["latency-bound"]["params"], **change}
    assert {r: changed[r] for r in ("memory-bound", "skewed")} == \
        {r: seed["params"]["variants"][r] for r in ("memory-bound", "skewed")}
    # a template switch takes the new template's own parameters (the starting point's others do not carry over)
    generator = OfflineProvider(skills).generator_for(KV4)
    assert rendered[2]["params"]["variants"]["latency-bound"] == \
        {"template": "triton-per-kv-head", "params": generator.complete("triton-per-kv-head", {})}
    err = capsys.readouterr().err
    assert "configuration 4 skipped, latency-bound: not allowed here: KV_LOAD=7" in err
    assert "configuration 5 skipped, no regime 'prefill' here (regimes: latency-bound, memory-bound, skewed)" in err
    sol = Solution.model_validate_json((tmp_path / f"{rendered[1]['solution']}.json").read_text())
    assert sol.spec.entry_point == "dispatch.py::run" and sol.definition == KV4


def test_a_configuration_that_completes_to_one_already_rendered_is_rendered_once(tmp_path, capsys):
    base = {"template": "triton-split-kv-fused", "BLOCK_N": 64}
    rendered = ts.render_all([base, {**base, "why": "the same kernel"}, {**base, "KV_LOAD": 2}],
                             "gqa_paged_decode_h32_kv8_d128_ps1", tmp_path)
    assert len(rendered) == 1
    err = capsys.readouterr().err
    assert f"configuration 1 is {rendered[0]['solution']} again here; skipped" in err
    assert "configuration 2 skipped, not allowed here: KV_LOAD=2 (allowed: [0, 1])" in err


def test_configurations_come_from_several_files_in_order(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"template": "a"}, {"template": "b"}]))
    (tmp_path / "b.json").write_text(json.dumps([{"template": "c"}]))
    both = ts.read_configs(f"{tmp_path / 'a.json'}, {tmp_path / 'b.json'}")
    assert [c["template"] for c in both] == ["a", "b", "c"] and ts.read_configs("") == []
