"""Instruction proof (harness/audits/sass.py): SASS opcode histograms of the built code, claims judged against the
SASS and against Nsight Compute counters. The fixtures in tests/fixtures/sass/ are real: the .cu files
there were compiled here with nvcc 13.0 (-cubin -arch=sm_90a / sm_100a) and disassembled with the
cuobjdump 12.8 that Triton ships."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.audits import sass
from harness.data.schema import SchemaError, Solution, dump_json, parse_model
from harness.audits.static_gate import PolicyError, policy_from_mapping
from support import KV8_PS1, ROOT

FIXTURES = Path(__file__).parent / "fixtures" / "sass"
HOPPER = FIXTURES / "hopper_kernels.sm_90a.sass"
BLACKWELL = FIXTURES / "blackwell_tcgen05.sm_100a.sass"
GMMA = "sm__inst_executed_pipe_tensor_op_gmma.sum"
HMMA = "sm__inst_executed_pipe_tensor_op_hmma.sum"
TC = "sm__inst_executed_pipe_tc.sum"
HMMA_SM100 = "sm__inst_executed_pipe_tensor_subpipe_hmma.sum"


def kernels_of(path: Path) -> dict[str, sass.KernelSass]:
    return {k.name: k for k in sass.parse_sass(path.read_text())}


# -- parsing ----------------------------------------------------------------------------------------------


def test_recorded_cuobjdump_output_parses_into_per_kernel_histograms():
    k = kernels_of(HOPPER)
    assert set(k) == {"loads_kernel", "wgmma_kernel", "mma_sync_kernel"}
    assert {x.arch for x in k.values()} == {"sm_90"}
    assert k["wgmma_kernel"].opcodes["HGMMA.64x8x16.F32.BF16"] == 1
    assert k["wgmma_kernel"].bases()["HGMMA"] == 1 and "HMMA" not in k["wgmma_kernel"].bases()
    assert k["mma_sync_kernel"].bases()["HMMA"] == 1
    assert sass.families_present(k["loads_kernel"].bases()) == {"tma": 1, "cp_async": 1, "ldsm": 1}
    # predicated instructions count under their opcode, not the predicate
    assert all(not op.startswith("@") for x in k.values() for op in x.opcodes)


def test_tcgen05_mma_on_sm100_is_a_utc_opcode():
    k = kernels_of(BLACKWELL)["tcgen05_kernel"]
    assert k.arch == "sm_100"
    assert sass.families_present(k.bases()) == {"tcgen05": 1}  # @!UP1 UTCHMMA; UTCATOMSWS (alloc) is not an MMA


def test_nvdisasm_output_parses_and_data_sections_are_not_instructions():
    text = """\t.target\tsm_90
\t.section\t.nv.info,"",@"SHT_CUDA_INFO"
        /*0030*/ \t.string\t"-arch sm_90a -m 64 "
\t.section\t.text.wgmma_kernel,"ax",@progbits
.text.wgmma_kernel:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0040*/               @P0 BRA `(.L_x_3) ;
        /*0210*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
\t.section\t.nv.shared.wgmma_kernel,"aw",@nobits
        /*0000*/                   NOTANOP R1 ;
"""
    (k,) = sass.parse_sass(text)
    assert (k.name, k.arch, k.opcodes) == ("wgmma_kernel", "sm_90", {"LDC": 1, "BRA": 1, "HGMMA.64x8x16.F32.BF16": 1})


def test_summary_is_bounded_and_names_families_per_kernel():
    kernels = sass.parse_sass(HOPPER.read_text())
    text = sass.summary_text(kernels, header="candidate: kernel.sm_90a.cubin")
    assert "wgmma_kernel [sm_90]" in text and "HGMMA.64x8x16.F32.BF16" in text and "families: wgmma 1" in text
    many = [sass.KernelSass(f"{k.name}_{i}", k.arch, k.opcodes) for i in range(300) for k in kernels]
    long = sass.summary_text(many)
    assert len(long) <= sass.SUMMARY_LIMIT and "more kernel(s) not listed" in long


# -- the verdict: claims x SASS x counters x arch ------------------------------------------------------------

HOPPER_BASES = sass.histogram(kernels_of(HOPPER).values())  # HGMMA, HMMA, UTMALDG, LDGSTS, LDSM
HMMA_ONLY = sass.histogram([kernels_of(HOPPER)["mma_sync_kernel"]])
BLACKWELL_BASES = sass.histogram(kernels_of(BLACKWELL).values())

CASES = [
    # (case, claims, bases, counters, arch, passed, words in the detail)
    ("no claims: informational", [], HOPPER_BASES, None, "sm_90", True, ["no claims", "wgmma 1"]),
    ("wgmma in SASS, counters not collected", ["wgmma"], HOPPER_BASES, None, "sm_90", True,
     ["wgmma: 1 in SASS", "counters not checked"]),
    ("wgmma claimed, only mma.sync built", ["wgmma"], HMMA_ONLY, None, "sm_90", False, ["HGMMA", "hmma 1"]),
    ("wgmma executed", ["wgmma"], HOPPER_BASES, {GMMA: 4096.0, HMMA: 0.0}, "sm_90", True, [f"{GMMA} = 4096"]),
    ("wgmma compiled in, never executed", ["wgmma"], HOPPER_BASES, {GMMA: 0.0, HMMA: 0.0}, "sm_90", False,
     ["never executed"]),
    ("the hmma counter is not proof of wgmma", ["wgmma"], HOPPER_BASES, {GMMA: 0.0, HMMA: 5e6}, "sm_90", False,
     ["never executed", "HMMA counter is no proof"]),
    ("hmma counter alone proves nothing for wgmma", ["wgmma"], HOPPER_BASES, {HMMA: 5e6}, "sm_90", True,
     ["not returned by the profiler"]),
    ("hmma claim: the hmma counter is its proof", ["hmma"], HOPPER_BASES, {HMMA: 5e6}, "sm_90", True,
     [f"{HMMA} = 5e+06"]),
    ("hmma claim never executed", ["hmma"], HOPPER_BASES, {HMMA: 0.0}, "sm_90", False, ["never executed"]),
    ("tcgen05 executed", ["tcgen05"], BLACKWELL_BASES, {TC: 128.0}, "sm_100", True, [f"{TC} = 128"]),
    ("tcgen05 not executed, mma.sync did", ["tcgen05"], BLACKWELL_BASES, {TC: 0.0, HMMA_SM100: 9e5}, "sm_100",
     False, ["never executed", "no proof of tcgen05"]),
    ("wgmma claimed for Blackwell code", ["wgmma"], BLACKWELL_BASES, {TC: 128.0}, "sm_100", False,
     ["HGMMA", "tcgen05 1"]),
    ("TMA has no counter: SASS only", ["tma", "cp_async", "ldsm"], HOPPER_BASES, {GMMA: 1.0}, "sm_90", True,
     ["tma: 1 in SASS", "ldsm: 1 in SASS", "counters not checked"]),
    ("several claims, one missing", ["wgmma", "tcgen05"], HOPPER_BASES, None, "sm_90", False, ["tcgen05 claimed"]),
    ("no SASS here: a note, not a failure", ["wgmma"], None, None, "sm_90", True,
     ["no SASS (no cuobjdump)", "not checked"]),
    ("unknown family", ["wgmmma"], HOPPER_BASES, None, "sm_90", False, ["unknown instruction families"]),
    # FP8 claims: the FP8 opcode itself, not any warpgroup or tcgen05 MMA
    ("fp8 wgmma proven", ["qgmma"], {**HOPPER_BASES, "QGMMA": 64}, {GMMA: 2e6}, "sm_90", True,
     ["qgmma: 64 in SASS", f"{GMMA} = 2e+06"]),
    ("bf16 wgmma is no fp8 claim", ["qgmma"], HOPPER_BASES, {GMMA: 2e6}, "sm_90", False, ["QGMMA", "wgmma"]),
    ("fp8 tcgen05 proven", ["utcqmma"], {**BLACKWELL_BASES, "UTCQMMA": 8}, {TC: 128.0}, "sm_100", True,
     ["utcqmma: 8 in SASS"]),
]


@pytest.mark.parametrize("case,claims,bases,counters,arch,passed,words", CASES, ids=[c[0] for c in CASES])
def test_instruction_proof_decisions(case, claims, bases, counters, arch, passed, words):
    audit = sass.instruction_proof(claims, bases, counters, arch, sass_note="no cuobjdump")
    assert audit.name == "instruction_proof"
    assert audit.passed is passed, audit.detail
    for w in words:
        assert w in audit.detail, (w, audit.detail)


def test_counter_metrics_per_arch_never_use_hmma_as_the_claimed_proof():
    assert sass.counter_metrics(["wgmma"], "sm_90a") == [GMMA, HMMA]  # HMMA for the record only
    assert sass.counter_metrics(["tcgen05"], "sm_100") == [TC, HMMA_SM100]
    assert sass.counter_metrics(["tma"], "sm_90") == [HMMA]
    for family in ("wgmma", "tcgen05"):
        assert not set(sass.FAMILIES[family].counters.values()) & sass.HMMA_COUNTERS


def test_only_the_candidates_own_kernels_count():
    profiled = [("wgmma_kernel(float *)", {GMMA: 0.0}), ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTN", {GMMA: 9e6}),
                ("void attn<128>(float *)", {GMMA: 64.0})]
    counters, matched = sass.own_kernel_counters(profiled, ["_Z12wgmma_kernelPf", "_Z4attnILi128EEvPf"], [GMMA])
    assert matched == ["wgmma_kernel(float *)", "void attn<128>(float *)"]
    assert counters == {GMMA: 64.0}  # cuBLAS's wgmma does not prove the candidate's
    assert sass.own_kernel_counters(profiled, ["_gqa_decode"], [GMMA]) == ({GMMA: None}, [])


# -- claims: solution spec and definition policy ---------------------------------------------------------


def cuda_solution(claims=None, source: str = "") -> dict:
    spec = {"language": "cuda", "target_hardware": ["H200"], "entry_point": "kernel.cu::run", "binding": "torch"}
    if claims is not None:
        spec["instruction_claims"] = claims
    return {"name": "wgmma_claim", "definition": KV8_PS1, "author": "tests", "spec": spec,
            "sources": [{"path": "kernel.cu", "content": source or (FIXTURES / "hopper_kernels.cu").read_text()}]}


def test_solution_claims_are_validated_hashed_and_dropped_when_unset():
    with pytest.raises(SchemaError, match="unknown instruction families"):
        parse_model(Solution, cuda_solution(["wgmma", "gmma"]), "s.json")
    plain, claimed = Solution.model_validate(cuda_solution()), Solution.model_validate(cuda_solution(["wgmma"]))
    assert "instruction_claims" not in dump_json(plain)["spec"]  # the official wire format stays as it was
    assert dump_json(claimed)["spec"]["instruction_claims"] == ["wgmma"]
    assert plain.content_hash != claimed.content_hash  # the archive keeps both solution files


def test_policy_claims_layer_and_typos_fail_when_the_policy_loads():
    doc = {"default": {}, "op_type": {"gqa_paged": {"instruction_claims": ["hmma"]}},
           "definition": {"d_wgmma": {"instruction_claims": ["wgmma", "tma"]}, "d_none": {"instruction_claims": []}}}
    assert sass.policy_claims(doc, "other", "gqa_paged") == ["hmma"]
    assert sass.policy_claims(doc, "d_wgmma", "gqa_paged") == ["wgmma", "tma"]  # a later layer replaces
    assert sass.policy_claims(doc, "d_none", "gqa_paged") == []
    assert sass.merged_claims(["tma", "ldsm"], ["wgmma", "tma"]) == ["wgmma", "tma", "ldsm"]
    policy_from_mapping(doc, definition="d_wgmma", op_type="gqa_paged")  # the static gate accepts the key
    with pytest.raises(PolicyError, match="instruction_claims"):
        policy_from_mapping({"definition": {"d": {"instruction_claims": ["wgmmma"]}}}, definition="d")
    shipped = sass.policy_claims(__import__("yaml").safe_load((ROOT / "definitions" / "audit_policy.yaml").read_text()),
                                 KV8_PS1, "gqa_paged")
    assert shipped == []  # nothing is required by default


# -- real tools ------------------------------------------------------------------------------------------

needs_tools = pytest.mark.skipif(shutil.which("nvcc") is None or sass.find_disassembler() is None,
                                 reason="needs nvcc and cuobjdump/nvdisasm")


@needs_tools
def test_nvcc_sm90a_cubin_shows_hgmma_hmma_and_tma(tmp_path):
    cubin = tmp_path / "k.sm_90a.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-o", str(cubin), str(FIXTURES / "hopper_kernels.cu")],
                   check=True, capture_output=True)
    kernels, notes = sass.disassemble([cubin, FIXTURES / "hopper_kernels.cu"], sass.find_disassembler())
    assert {k.name for k in kernels} == {"loads_kernel", "wgmma_kernel", "mma_sync_kernel"}
    assert sass.families_present(sass.histogram(kernels)) == {"wgmma": 1, "hmma": 1, "tma": 1, "cp_async": 1, "ldsm": 1}
    assert len(notes) == 1 and "hopper_kernels.cu" in notes[0]  # a file without device code is a note
    assert sass.instruction_proof(["wgmma", "tma"], sass.histogram(kernels), None, "sm_90").passed


# -- the pipeline, as a user runs it ---------------------------------------------------------------------


@needs_tools
def test_submit_json_and_show_carry_the_audit_and_the_sass_artifact(tmp_path, tiny_dataset_root):
    from test_cli_submit import harness

    archive = tmp_path / "archive"
    archive.mkdir()
    honest, false_claim = tmp_path / "honest.json", tmp_path / "false.json"
    honest.write_text(json.dumps(cuda_solution(["wgmma", "tma"])))
    false_claim.write_text(json.dumps({**cuda_solution(["tcgen05"]), "name": "tcgen05_claim"}))
    proc = harness("submit", str(honest), str(false_claim), "--archive", str(archive), "--dataset",
                   str(tiny_dataset_root), "-w", "tiny_b2_t40", "--json")
    results, decoder, text = [], json.JSONDecoder(), proc.stdout.strip()
    while text:  # one pretty-printed object per solution
        obj, end = decoder.raw_decode(text)
        results.append(obj)
        text = text[end:].strip()
    assert len(results) == 2, proc.stdout + proc.stderr
    ok, bad = ([a for a in r["audits"] if a["name"] == "instruction_proof"][0] for r in results)
    assert ok["passed"] and "wgmma: 1 in SASS" in ok["detail"] and "counters not checked" in ok["detail"]
    assert not bad["passed"] and "tcgen05 claimed" in bad["detail"]
    assert any("instruction_proof" in b for b in results[1]["promotion_blockers"])

    shown = harness("show", str(results[1]["submission_id"]), "--archive", str(archive))
    assert "audit instruction_proof failed" in shown.stdout, shown.stdout
    from harness.archive.database import Archive

    db = Archive(archive).db
    (blob,) = [r["blob"] for r in db["artifacts"].rows_where("submission_id = ? and kind = 'sass'",
                                                            [results[0]["submission_id"]])]
    text = Archive(archive).get_blob(blob).decode()
    assert "wgmma_kernel [sm_90]" in text and len(text) < 4096


@needs_tools
def test_full_level_on_cpu_notes_the_missing_gpu_and_python_code_has_no_sass(tiny_dataset_root, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from support import TORCH_CANDIDATE, solution_dict

    python = solution_dict(TORCH_CANDIDATE)
    python["spec"]["instruction_claims"] = ["hmma"]
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], audit_level="full")) as session:
        cuda = session.submit(Solution.model_validate(cuda_solution(["wgmma"])))
        plain = session.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE)))
        claimed = session.submit(Solution.model_validate(python))
    (audit,) = cuda.audits
    assert audit.passed and "counters not checked (no GPU on this host)" in audit.detail
    assert plain.audits == []  # nothing claimed, nothing built for a GPU: no audit to show
    (audit,) = claimed.audits  # a note, never held against the candidate
    assert audit.passed and "no SASS (the build produced no GPU binary)" in audit.detail, audit
    assert not any("instruction_proof" in b for b in claimed.promotion_blockers)
