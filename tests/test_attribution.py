"""Attribution from the official timer's CUPTI records: own kernels vs library kernels (harness.audits.attribution)."""

import pytest

from harness.audits.attribution import (OwnKernels, attribution_verdict, is_housekeeping, is_own, own_kernels,
                                 qualified_name)
from harness.audits.verdicts import promotion_blockers, unconfirmed_library_use

TRITON = {"kernel.py": "import triton\n\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef _decode_kernel(q, k):\n"
                       "    pass\n\n\ndef run(q, k):\n    _decode_kernel[(1,)](q, k)\n"}
CUDA = {"kernel.cu": 'extern "C" __global__ void plain_kernel(float* x) {}\n'
                     "template <int N>\n__global__ void __launch_bounds__(128) split_kv(const float* q) {}\n"
                     "namespace mine { __global__ void merge_states(float* o) {} }\n"}
INLINE = {"inline.py": 'from torch.utils.cpp_extension import load_inline\nSRC = r"""\n'
                       "__global__ void gqa_decode_kernel(const __nv_bfloat16* q) {}\n\"\"\"\n"}

ATEN_FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
ATEN_COPY = ("_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel"
             "_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c108BFloat16EE_EEvS4_RKT_EUliE_EEviT1_")
ATEN_SUB = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIiEESt5arrayIPcLm3EEEEviT0_T1_"
ATEN_SOFTMAX = ("_ZN43_GLOBAL__N__b6d5ab84_10_SoftMax_cu_9f978f6320softmax_warp_forward"
                "IfffLi9ELb0ELb0EEEvPT0_PKT_iiiPKbib")
NVJET = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT"
ANON_CU = {"kernel.cu": "#include <cuda_bf16.h>\nnamespace {\nconstexpr int kTile = 64;\n"
                        "__device__ float helper(float x) { return x; }\n"
                        "template <int N>\n__global__ void decode_kernel(float* o) { if (N) { o[0] = helper(1.f); } }\n"
                        "}  // namespace\n__global__ void merge_kernel(float* o) {}\n"}
ANON_INLINE = {"kernel.py": 'SRC = r"""\nnamespace {\n__global__ void decode_kernel(float* o) {}\n}\n"""\n'}


def nvcc_anonymous(unit: str, kernel: str = "decode_kernel") -> str:
    """The symbol nvcc gives ``template <int N> __global__ void kernel(float*)`` at N=64 in an anonymous namespace
    of the translation unit ``unit``: the namespace names the unit's file ("." as "_") between two hashes."""
    namespace = f"_GLOBAL__N__1c2d3e4f_{len(unit)}_{unit.replace('.', '_')}_a1b2c3d4"
    return f"_ZN{len(namespace)}{namespace}{len(kernel)}{kernel}ILi64EEEvPf"


ANON_OWN = nvcc_anonymous("kernel.cu")
ANON_DEMANGLED = "void (anonymous namespace)::decode_kernel<64>(float*)"
FLASHINFER = "_ZN10flashinfer33BatchDecodeWithPagedKVCacheKernelEv"


@pytest.mark.parametrize("symbol, parts", [
    ("_Z8split_kvILi4EEvPKf", ["split_kv"]),
    ("_ZN4mine12merge_statesEPf", ["mine", "merge_states"]),
    (FLASHINFER, ["flashinfer", "BatchDecodeWithPagedKVCacheKernel"]),
    (ATEN_FILL, ["at", "native", "vectorized_elementwise_kernel"]),
    ("_decode_kernel", ["_decode_kernel"]),
    ("void at::native::reduce_kernel<512, 1>(int)", ["at", "native", "reduce_kernel"]),
    (ANON_DEMANGLED, ["_GLOBAL__N", "decode_kernel"]),
    (ANON_OWN, ["_GLOBAL__N__1c2d3e4f_9_kernel_cu_a1b2c3d4", "decode_kernel"]),
    (ATEN_SOFTMAX, ["_GLOBAL__N__b6d5ab84_10_SoftMax_cu_9f978f63", "softmax_warp_forward"]),
])
def test_qualified_name(symbol, parts):
    assert qualified_name(symbol) == parts


def test_own_kernels_come_from_the_sources():
    own = own_kernels({**TRITON, **CUDA, **INLINE})
    assert {"_decode_kernel", "run"} <= own.python
    assert {"plain_kernel", "split_kv", "merge_states", "gqa_decode_kernel"} <= own.cuda


CUBLAS_GEMM_SN = ("_Z16gemmSN_NN_kernelIfLi256ELi4ELi2ELi8ELi4ELi4ELb0E30cublasGemvTensorStridedBatchedIKfES1_S1_fEv"
                  "T6_T7_T8_T9_")
CUBLAS_DOT = "_Z10dot_kernelIfLi128ELi0E15cublasDotParamsI16cublasGemvTensorIKfES1_EEvT2_"


@pytest.mark.parametrize("name, sources, mine", [
    ("_decode_kernel", TRITON, True),  # Triton: a plain C name, the Python function's
    ("plain_kernel", CUDA, True),  # extern "C"
    ("_Z8split_kvILi4EEvPKf", CUDA, True),
    ("_ZN4mine12merge_statesEPf", CUDA, True),
    ("_Z17gqa_decode_kernelPK13__nv_bfloat16", INLINE, True),  # CUDA text inside Python (load_inline)
    # a Python def cannot claim a C++ symbol, and no name can claim a library's namespace or prefix
    (ATEN_SOFTMAX, {"k.py": "def softmax_warp_forward():\n    pass\n"}, False),
    (ATEN_SOFTMAX, {"k.cu": "__global__ void softmax_warp_forward(float* x) {}\n"}, False),
    (ATEN_FILL, {"k.cu": "__global__ void vectorized_elementwise_kernel(float* x) {}\n"}, False),
    (FLASHINFER, {"k.cu": "__global__ void BatchDecodeWithPagedKVCacheKernel() {}\n"}, False),
    (NVJET, {"k.py": f"def {NVJET}():\n    pass\n"}, False),
    ("[memset bytes=4 value=0]", TRITON, False),
    ("_decode_kernel_v2", TRITON, False),  # no substring matches
    # torch.compile's Triton kernels: their names are predictable, a decoy @triton.jit def of the same name in the
    # candidate's sources does not make PyTorch's generated kernel the candidate's
    ("triton_per_fused__softmax_0", {"k.py": "@triton.jit\ndef triton_per_fused__softmax_0(x):\n    pass\n"}, False),
    ("triton_tem_fused_bmm_1", {"k.py": "def triton_tem_fused_bmm_1(x):\n    pass\n"}, False),
    ("triton_poi_fused_add_mul_2", {"k.py": "def triton_poi_fused_add_mul_2(x):\n    pass\n"}, False),
    ("triton_", {"k.py": "def triton_(x):\n    pass\n"}, False),
    ("triton_red__3", {"k.py": "def triton_red__3(x):\n    pass\n"}, False),
    # a contestant's own names that merely start like Inductor's
    ("triton_gqa_decode", {"k.py": "def triton_gqa_decode(x):\n    pass\n"}, True),
    ("triton_split_kv", {"k.py": "def triton_split_kv(x):\n    pass\n"}, True),
    ("triton_forward_kernel", {"k.py": "def triton_forward_kernel(x):\n    pass\n"}, True),
    ("triton_persistent_moe", {"k.py": "def triton_persistent_moe(x):\n    pass\n"}, True),
    ("triton_red_sum", {"k.py": "def triton_red_sum(x):\n    pass\n"}, True),
    # a kernel of the candidate's in an anonymous namespace (nvcc names its translation unit in the symbol)
    (ANON_OWN, ANON_CU, True),
    (nvcc_anonymous("cuda.cu"), ANON_INLINE, True),  # load_inline compiles its text as cuda.cu
    (ANON_OWN, ANON_INLINE, False),
    (nvcc_anonymous("SoftMax.cu"), ANON_CU, False),  # a unit the candidate has not got
    (nvcc_anonymous("main.cu"), {"csrc/main.cu": '#include "decode.cuh"\n', "csrc/decode.cuh": ANON_CU["kernel.cu"]},
     True),  # declared in a header, compiled in the unit that includes it
    (ANON_OWN, {"kernel.cu": "__global__ void decode_kernel(float* o) {}\n"}, False),  # not declared anonymous
    (ANON_DEMANGLED, ANON_CU, True),
    ("_ZN12_GLOBAL__N_113decode_kernelEPf", ANON_CU, True),  # a host compiler's name for it: no unit named
    # PyTorch's file-local kernels stay PyTorch's, even beside a decoy declared in an anonymous namespace
    (ATEN_SOFTMAX, {"k.cu": "namespace { __global__ void softmax_warp_forward(float* x) {} }\n"}, False),
    # cuBLAS's kernels outside any namespace (H100, 2026-12-06: a contestant's DSA attention through torch.matmul
    # ran gemmSN_NN_kernel) carry cuBLAS's types in their template arguments; a decoy of the name claims nothing
    (CUBLAS_GEMM_SN, {"k.cu": "template <typename T, int A> __global__ void gemmSN_NN_kernel(T* x) {}\n"}, False),
    (CUBLAS_DOT, {"k.cu": "__global__ void dot_kernel(float* x) {}\n"}, False),
    ("_Z10dot_kernelPf", {"k.cu": "__global__ void dot_kernel(float* x) {}\n"}, True),  # the candidate's own
    ("_ZN2at6native12_GLOBAL__N_113decode_kernelEPf", ANON_CU, False),
])
def test_is_own(name, sources, mine):
    assert is_own(name, own_kernels(sources)) is mine


@pytest.mark.parametrize("name, chore", [
    ("[memset bytes=4096 value=0]", True), ("[memcpy kind=1 bytes=8]", True), (ATEN_FILL, True),
    (ATEN_COPY, True), (ATEN_SUB, False), (ATEN_SOFTMAX, False), (NVJET, False), ("_decode_kernel", False),
    # names that merely contain a chore's name compute: a prefill kernel is not a fill, a recopy is not a copy
    ("_gdn_prefill_kernel", False), ("_fwd_prefill_kernel", False), ("_Z19attn_prefill_kernelPf", False),
    ("kv_recopy_kernel", False), ("broadcast_kernel", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", True),
])
def test_housekeeping(name, chore):
    assert is_housekeeping(name) is chore


def test_torch_compile_beside_decoy_defs_is_a_fallback():
    """The judge set's compiled_decoys (benchmarks/solutions/judge/): torch.compile does the attention, the sources
    carry never-launched Triton defs under the names Inductor gives its kernels. What a GPU's records of one of its
    calls would hold: Inductor's kernels (the very names of the decoys) and a cuBLAS batched matmul."""
    from support import ROOT

    source = (ROOT / "benchmarks" / "solutions" / "judge" / "compiled_decoys.py").read_text()
    own = own_kernels({"compiled_decoys.py": source})
    assert {"triton_per_fused__softmax_mul_0", "triton_poi_fused__to_copy_1"} <= own.python  # the decoys are there
    records = {"triton_per_fused__softmax_mul_0": 3e6, "triton_red_fused__softmax_mul_0": 1e6,
               "triton_poi_fused__to_copy_1": 2e6, "triton_tem_fused_bmm_2": 2e6, NVJET: 4e6}
    verdict = attribution_verdict(records, own, 0.95, calls=50)
    assert not verdict.passed and "none of the candidate's kernels ran" in verdict.detail, verdict.detail


OWN = own_kernels({**TRITON, "extra.py": "def _gdn_prefill_kernel(x):\n    pass\n\n\ndef copy_kernel(x):\n    pass\n"})


@pytest.mark.parametrize("kernel_ns, calls, passed, words", [
    # the example: its kernel, a memset of the split-K buffer
    ({"_decode_kernel": 500e3, "[memset bytes=4096 value=0]": 50e3}, 50, True, "100.0% of compute"),
    # an honest wrapper at batch 1: 8 us kernel, torch.zeros (fill) 2 us and indptr[1:] - indptr[:-1] 2 us
    ({"_decode_kernel": 400e3, ATEN_FILL: 100e3, ATEN_SUB: 100e3}, 50, True, "2.0 us of library compute"),
    # PyTorch does the attention; a token Triton kernel runs beside it
    ({"_decode_kernel": 50e3, ATEN_SOFTMAX: 2e6, NVJET: 4e6}, 50, False, "fallback: 0.8%"),
    # FlashInfer hidden behind a wrapper
    ({FLASHINFER: 1e6, ATEN_COPY: 1e4}, 50, False, "fallback: none of the candidate's kernels ran"),
    # the work done on the host: only copies on the GPU
    ({"[memcpy kind=2 bytes=1048576]": 1e6, "[memcpy kind=1 bytes=1048576]": 1e6}, 50, False,
     "fallback: none of the candidate's kernels ran"),
    # a kernel of the candidate's own is its compute whatever its name (here a prefill kernel beside a memcpy)
    ({"_gdn_prefill_kernel": 900e3, "[memcpy kind=8 bytes=4]": 1e3}, 5, True, "100.0% of compute"),
    ({"copy_kernel": 900e3}, 5, True, "100.0% of compute"),
    # a library's prefill kernel is not housekeeping: hidden behind a token kernel of the candidate's, caught
    ({"_decode_kernel": 10e3, "_fwd_prefill_kernel": 900e3}, 5, False, "fallback: 1.1%"),
    # a large workload: 5% in aten is far over the allowance
    ({"_decode_kernel": 95e6, ATEN_SUB: 6e6}, 50, False, "fallback: 94.1%"),
])
def test_attribution_verdict(kernel_ns, calls, passed, words):
    verdict = attribution_verdict(kernel_ns, OWN, 0.95, calls, allowance_us=5.0)
    assert verdict.passed is passed, verdict
    assert words in verdict.detail


ATEN_EXP = ("_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_15exp_kernel_cuda"
            "ERNS_18TensorIteratorBaseEEvS4_T0_T1_")
ATEN_MUL = ("_ZN2at6native27unrolled_elementwise_kernelINS0_13BinaryFunctorIfffNS0_15binary_internal"
            "10MulFunctorIfEEEEvT_")
ATEN_REDUCE = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfNS0_6SumOpsEEEEEEvT1_"
ATEN_INDEX = "_ZN2at6native24index_elementwise_kernelILi128ELi4EZNS0_16gpu_index_kernelEEvlT1_"


@pytest.mark.parametrize("kernel_ns, passed, words", [
    # GDN decode at batch 1: a 3 us kernel, gates in PyTorch (exp, softplus, mul...: 7 launches, 14 us a call)
    ({"_decode_kernel": 50 * 3e3, ATEN_EXP: 50 * 8e3, ATEN_MUL: 50 * 6e3}, True, "PyTorch glue 14.0 us"),
    # the same kernels but 40 us of pointwise work a call: over the glue budget, library compute
    ({"_decode_kernel": 50 * 3e3, ATEN_EXP: 50 * 20e3, ATEN_MUL: 50 * 20e3}, False, "fallback: 7.0%"),
    # glue never covers a reduction or a gather, however small their share of time may look
    ({"_decode_kernel": 50 * 3e3, ATEN_EXP: 50 * 8e3, ATEN_REDUCE: 50 * 10e3}, False, "fallback"),
    ({"_decode_kernel": 50 * 3e3, ATEN_INDEX: 50 * 10e3}, False, "fallback"),
    # pointwise glue alone, no kernel of the candidate's: nothing of its own ran
    ({ATEN_EXP: 50 * 8e3}, False, "fallback: none of the candidate's kernels ran"),
])
def test_pytorch_pointwise_glue_is_left_out_up_to_its_budget(kernel_ns, passed, words):
    verdict = attribution_verdict(kernel_ns, OWN, 0.95, 50, allowance_us=5.0, pointwise_us=25.0)
    assert verdict.passed is passed, verdict
    assert words in verdict.detail
    assert not attribution_verdict(kernel_ns, OWN, 0.95, 50, allowance_us=5.0).passed  # no glue budget: caught


def test_the_datasets_baselines_own_their_library_kernels():
    none = OwnKernels(frozenset(), frozenset())
    assert not attribution_verdict({FLASHINFER: 1e6}, none, 0.95, 50).passed
    assert attribution_verdict({FLASHINFER: 1e6}, none, 0.95, 50, library_is_own=True).passed


TORCH_FINDING = {"rule": "torch_compute", "severity": "warning", "path": "kernel.py", "line": 7,
                 "message": "torch.softmax is PyTorch compute"}
ATTRIBUTED = {"name": "attribution", "passed": True, "detail": "100.0% of compute time in the candidate's kernels"}


@pytest.mark.parametrize("audits, findings, blocked", [
    ([ATTRIBUTED], [TORCH_FINDING], False),  # run time cleared the warning
    ([], [TORCH_FINDING], True),  # no attribution (CPU, CUDA events): the warning stands, unconfirmed
    ([], [], False),  # nothing to confirm
    ([], [{**TORCH_FINDING, "message": "x (allowed: the dataset's own library baseline)"}], False),
])
def test_library_findings_are_settled_by_attribution(audits, findings, blocked):
    workloads = [{"label": "b1", "status": "PASSED", "audits": audits}]
    assert bool(unconfirmed_library_use(workloads, findings)) is blocked
    assert any("unconfirmed" in r for r in promotion_blockers(workloads, findings)) is blocked


def test_timing_without_cupti_records_cannot_be_cleared(tiny_dataset_root, tmp_path):
    """CUDA-events timing has no kernel records: the evaluation gets a failed attribution audit (not a fallback);
    without any timing (no GPU) only the note says so."""
    from harness.archive.database import Archive
    from harness.audits.verdicts import is_fallback
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions, WorkloadResult
    from harness.data.schema import Solution

    from support import triton_example

    solution = Solution.model_validate(triton_example())
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions()) as s:
        events = WorkloadResult("w", "b1", "PASSED", timing=[{"median_ms": 0.01, "iterations": 50, "kernel_ns": {}}])
        s._attribution(solution, events)
        untimed = WorkloadResult("w", "b1", "PASSED")
        s._attribution(solution, untimed)
        timed = WorkloadResult("w", "b1", "PASSED", timing=[{"median_ms": 0.01, "iterations": 50,
                                                             "kernel_ns": {"_gqa_decode_kernel": 5e5}}])
        s._attribution(solution, timed)
    [audit] = events.audits
    assert not audit.passed and "without CUPTI" in audit.detail and not is_fallback(events.audits)
    assert not untimed.audits and "attribution unavailable: no timing" in untimed.timing_note
    assert timed.audits[0].passed, timed.audits


@pytest.mark.parametrize("has_work, passed", [(False, True), (True, False), (None, False)])
def test_a_call_with_no_work_needs_no_kernel_of_its_own_on_the_gpu(tiny_dataset_root, tmp_path, has_work, passed):
    """An MoE rank no token routes to: the honest solution fills its output with zeros and launches nothing of its
    own (one token: half the official T=1 draws). Where the reference's output took no computing on every timed
    input that passes, and says why; where it did (or it is not known), the same records are a fallback."""
    from harness.archive.database import Archive
    from harness.audits.verdicts import is_fallback
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions, WorkloadResult
    from harness.data.schema import Solution

    from support import triton_example

    solution = Solution.model_validate(triton_example())
    zeros_only = {"median_ms": 0.004, "iterations": 50, "kernel_ns": {ATEN_FILL: 50 * 1.5e3}}
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions()) as s:
        wr = WorkloadResult("w", "t1", "PASSED", timing=[zeros_only], has_work=has_work)
        s._attribution(solution, wr)
    [audit] = wr.audits
    assert audit.passed is passed and is_fallback(wr.audits) is not passed, audit
    assert ("no work" in audit.detail) is passed and "none of the candidate's kernels ran" in audit.detail


ATEN_TOPK = "_ZN2at6native6sbtopk10gatherTopKIfjLi2ELb0EEEvNS_4cuda6detail10TensorInfoIT_T0_EES8_"
ATEN_INDEX_ADD = "_ZN2at6native19indexFuncLargeIndexIN3c108BFloat16EljLi2ELi2ELin2ELb1ENS0_44_GLOBAL__N__indexing"


@pytest.mark.parametrize("kernel_ns, aten_us, passed", [
    # MoE with its routing in PyTorch (top-k, sums, pointwise: 60 us a call) beside 250 us of its own GEMMs
    ({"_decode_kernel": 50 * 250e3, ATEN_TOPK: 50 * 30e3, ATEN_REDUCE: 50 * 10e3, ATEN_EXP: 50 * 20e3}, 150.0, True),
    # the same without the family's ATen budget: the top-k and sums are library compute
    ({"_decode_kernel": 50 * 250e3, ATEN_TOPK: 50 * 30e3, ATEN_REDUCE: 50 * 10e3, ATEN_EXP: 50 * 20e3}, 0.0, False),
    # over the budget, every ATen kernel counts again, pointwise ones too
    ({"_decode_kernel": 50 * 250e3, ATEN_TOPK: 50 * 100e3, ATEN_EXP: 50 * 100e3}, 150.0, False),
    # cuBLAS is never glue, whatever the budget
    ({"_decode_kernel": 50 * 250e3, NVJET: 50 * 100e3}, 150.0, False),
])
def test_a_family_may_count_its_aten_bookkeeping_as_glue(kernel_ns, aten_us, passed):
    verdict = attribution_verdict(kernel_ns, OWN, 0.95, 50, allowance_us=5.0, pointwise_us=25.0, aten_us=aten_us)
    assert verdict.passed is passed, verdict


@pytest.mark.parametrize("kernel_ns, share, passed", [
    # vLLM-style MoE at T=14107: 7 ms of its own GEMMs, routing 100 us and the sum over the top-k 500 us in PyTorch
    ({"_decode_kernel": 50 * 7000e3, ATEN_TOPK: 50 * 100e3, ATEN_REDUCE: 50 * 500e3}, 0.15, True),
    # the same without the share: past the 150 us budget, 92% own, a fallback
    ({"_decode_kernel": 50 * 7000e3, ATEN_TOPK: 50 * 100e3, ATEN_REDUCE: 50 * 500e3}, 0.0, False),
    # a contestant's Triton MoE on an H100 at T=14107: 79.6% own; top-k, index_add_ and a bf16 cast 20.4%
    ({"_decode_kernel": 50 * 6370e3, ATEN_TOPK: 50 * 312e3, ATEN_INDEX_ADD: 50 * 752e3, ATEN_EXP: 50 * 566e3}, 0.30,
     True),
    ({"_decode_kernel": 50 * 6370e3, ATEN_TOPK: 50 * 312e3, ATEN_INDEX_ADD: 50 * 752e3, ATEN_EXP: 50 * 566e3}, 0.15,
     False),
    # the GEMMs done by ATen reductions and pointwise kernels beside a token kernel: far past 30%
    ({"_decode_kernel": 50 * 100e3, ATEN_REDUCE: 50 * 3000e3, ATEN_EXP: 50 * 1000e3}, 0.30, False),
    # a quarter of the experts' GEMM work done so (30x slower than tensor-core GEMMs) is most of the call
    ({"_decode_kernel": 50 * 5250e3, ATEN_REDUCE: 50 * 52500e3}, 0.30, False),
    # cuBLAS is never glue, whatever the share
    ({"_decode_kernel": 50 * 7000e3, NVJET: 50 * 600e3}, 0.15, False),
])
def test_a_family_may_count_aten_bookkeeping_up_to_a_share_of_the_call_as_glue(kernel_ns, share, passed):
    verdict = attribution_verdict(kernel_ns, OWN, 0.95, 50, allowance_us=5.0, pointwise_us=25.0, aten_us=150.0,
                                  aten_share=share)
    assert verdict.passed is passed, verdict


def test_the_moe_policy_gives_its_routing_a_glue_budget_and_the_others_none():
    import yaml

    from harness.audits.static_gate.policy import DEFAULT_POLICY_PATH
    from harness.audits.thresholds import policy_thresholds

    doc = yaml.safe_load(open(DEFAULT_POLICY_PATH))
    moe = policy_thresholds(doc, "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", "moe")
    gqa = policy_thresholds(doc, "gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged")
    assert moe["attribution_aten_glue_us"] == 150.0 and "attribution_aten_glue_us" not in gqa
    assert moe["attribution_aten_glue_share"] == 0.30 and "attribution_aten_glue_share" not in gqa
