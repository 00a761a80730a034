"""The gqa-decode templates' KV_LOAD on a GPU (marker `gpu`): page indices a step ahead and K/V tiles as TMA boxes,
rendered as the loop renders them, through the whole harness on page size 64 (partial last pages, a skewed batch):
correct, officially timed, every audit clean, promotable. On CPU the same paths run under the interpreter
(tests/test_skill_templates_interpreter.py) and compile for sm_90 (tests/test_static_resources.py)."""

from __future__ import annotations

import pytest

from controller.providers.offline import offline_generator, slug
from controller.skills import load_skills
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions
from support import ROOT

pytestmark = pytest.mark.gpu

KV4_PS64 = "gqa_paged_decode_h32_kv4_d128_ps64"
WORKLOADS = ["uniform_b1_kv512", "uniform_b64_kv2048", "skewed_b64"]
CONFIGS = [
    {"template": "triton-split-kv-fused", "KV_LOAD": 2, "NUM_STAGES": 3, "MERGE_FANIN": 8, "WAVE_SLOTS_PER_SM": -1},
    {"template": "triton-split-kv-fused", "KV_LOAD": 1, "BLOCK_N": 64, "NUM_STAGES": 3, "MERGE_FANIN": 8,
     "SATURATING_PROGRAMS_PER_SM": 2, "WAVE_SLOTS_PER_SM": -1},
    {"template": "triton-per-kv-head", "KV_LOAD": 2, "NUM_STAGES": 3},
    # TMA boxes from one program per SM up (64 requests x 4 KV heads, skewed_b64), pointer loads below it (batch 1)
    {"template": "triton-per-kv-head", "KV_LOAD": 2, "NUM_STAGES": 3, "KV_LOAD_MIN_PROGRAMS_PER_SM": 1},
]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    archive = Archive(tmp_path_factory.mktemp("archive"))
    with Session(Dataset(), archive, SubmitOptions(workloads=WORKLOADS)) as s:
        yield s


def config_id(c):
    return f"{c['template']}-load{c['KV_LOAD']}-min{c.get('KV_LOAD_MIN_PROGRAMS_PER_SM', 0)}"


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_a_kv_load_variant_passes_the_harness_on_the_gpu(session, config):
    generator = offline_generator(load_skills(ROOT / "skills"), KV4_PS64)
    name = config["template"]
    params = generator.complete(name, {k: v for k, v in config.items() if k != "template"})
    origin = {"template": name, "params": params}
    solution = Solution.model_validate(generator.render(origin, KV4_PS64, slug(origin), "tests", "H200"))
    result = session.submit(solution)
    assert [w.status for w in result.workloads] == ["PASSED"] * len(WORKLOADS), [w.message for w in result.workloads]
    for w in result.workloads:
        assert w.aligned is True, w.timing_note  # CUPTI: the official method
        attribution = next(a for a in w.audits if a.name == "attribution")
        assert attribution.passed and attribution.share > 0.99, attribution
    assert result.promotion_blockers == [], result.promotion_blockers
