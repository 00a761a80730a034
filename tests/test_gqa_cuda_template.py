"""The gqa-decode skill's CUDA template (cuda-mma-split-kv-fused): it renders for every definition and for the
default and edge parameters into a solution the harness's static gate and signature check accept; its kernel
compiles for sm_90a, the SASS holds tensor-core HMMA, and its merges keep a batch of loads in flight
(tests/test_gqa_cuda_template_model.py drives the template's Python with a model of the kernel).

Nothing here runs the CUDA kernel: correctness and speed on a GPU are not checked by these tests."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from controller.providers.offline import offline_generator
from controller.skills import kernel_templates, load_skills, machine_blocks, render_skill_template
from harness.audits.sass import disassemble, find_disassembler
from harness.audits.static_gate import load_policy, scan_sources
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.sandbox.build import static_signature_problem

from support import DEFINITIONS, ROOT

NAME = "cuda-mma-split-kv-fused"
GQA_DEFINITIONS = [f"gqa_paged_decode_h32_kv{kv}_d128_ps{ps}" for kv in (8, 4) for ps in (1, 64)]
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


@pytest.fixture(scope="module")
def gqa(skills):
    return skills["gqa-decode"]


@pytest.fixture(scope="module")
def template(gqa):
    return kernel_templates(gqa)[NAME]


def edge_params(template) -> list[dict]:
    """The defaults, then every free placeholder at its smallest and largest value (the others at defaults)."""
    out = [dict(template.defaults)]
    for name, choices in template.placeholders.items():
        if name in template.fixed_by_definition:
            continue
        for value in (choices[0], choices[-1]):
            if value != template.defaults[name]:
                out.append({**template.defaults, name: value})
    out.append({**template.defaults, "BLOCK_N": 128, "CHUNK_TOKENS": 128, "NUM_WARPS": 8, "STAGES": 4,
                "PROGRAMS_PER_SM": 8})  # deepest
    out.append({**template.defaults, "BLOCK_N": 32, "CHUNK_TOKENS": 4096, "NUM_WARPS": 2, "STAGES": 2,
                "PROGRAMS_PER_SM": 1, "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1})
    return out


def string_constant(source: str, name: str) -> str:
    """A module-level string constant of the rendered file, read from its AST (the file is never imported here:
    importing it builds the extension)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} in the rendered file")


# ------------------------------------------------------------------------------------------ registration


def test_registered_with_placeholders_matching_its_file_and_never_the_naive_start(gqa, template):
    (block,) = machine_blocks(gqa)
    assert template.language == "python" and template.setup == "plan" and template.entry_point == "run"
    assert template.fixed_by_definition == ["PAGE_SIZE"]
    from controller.skills import template_placeholders

    text = (gqa.folder / template.path).read_text(encoding="utf-8")
    assert set(template_placeholders(text)) == set(template.placeholders)
    assert block["naive"]["template"] != NAME
    assert all(point["template"] != NAME for point in block["starting_points"].values())
    for chunk in template.placeholders["CHUNK_TOKENS"]:  # a chunk is whole tiles for every BLOCK_N
        assert all(chunk % block_n == 0 for block_n in template.placeholders["BLOCK_N"])
    assert "cuda-mma-split-kv-fused" in gqa.body and "sm__inst_executed_pipe_tensor_op_hmma" in gqa.body


# ------------------------------------------------------------- rendering, static gate, signature check


@pytest.mark.parametrize("definition", GQA_DEFINITIONS)
def test_renders_for_every_definition_into_a_solution_the_gate_accepts(skills, template, definition):
    generator = offline_generator(skills, definition)
    assert NAME in generator.templates
    naive = generator.naive()
    assert naive["template"] != NAME
    page_size = int(definition.rsplit("ps", 1)[1])
    policy = load_policy(op_type="gqa_paged", definition=definition)
    dataset_definition = Dataset(DEFINITIONS).definition(definition)
    for params in edge_params(template):
        origin = {"template": NAME, "params": generator.complete(NAME, params)}
        assert origin["params"] == params
        solution = Solution.model_validate(generator.render(origin, definition, "cuda_mma", "test", "H200"))
        assert solution.spec.language.value == "python"
        assert solution.spec.entry_point == "kernel.py::run" and solution.spec.setup == "kernel.py::plan"
        (source,) = solution.sources
        assert f"PAGE_SIZE = {page_size}\n" in source.content
        assert "{" + "PAGE_SIZE}" not in source.content
        assert static_signature_problem(solution, dataset_definition) is None
        findings = scan_sources({s.path: s.content for s in solution.sources}, "python", policy)
        assert findings == [], (params, findings)
        kernel = string_constant(source.content, "KERNEL_SRC")
        constants = {"PAGE_SIZE": "kPageSize", "BLOCK_N": "kBlockN", "NUM_WARPS": "kNumWarps", "STAGES": "kStages",
                     "CLUSTER": "kCluster"}
        for name, value in {**params, "PAGE_SIZE": page_size}.items():
            assert f"\n{name} = {value}" in source.content, name  # every placeholder, as the module's constant
            if name in constants:  # compiled in; the chunk size is the plan's, per batch
                assert f"constexpr int {constants[name]} = {value}" in kernel, name
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in kernel
        assert "cp.async.cg.shared.global" in kernel and "__threadfence()" in kernel


def test_the_gate_reads_the_embedded_cuda(gqa, template):
    """A positive control: the same file with an environment probe in its kernel text is an error."""
    source = render_skill_template(gqa, template, {**template.defaults, "PAGE_SIZE": 1})
    probed = source.replace("cp_async_commit();\n    }", 'cp_async_commit(); getenv("HOME");\n    }', 1)
    assert probed != source
    findings = scan_sources({"kernel.py": probed}, "python", load_policy(op_type="gqa_paged"))
    assert any(f.rule == "env_probe" and f.severity == "error" for f in findings)


# -------------------------------------------------------------------------------- nvcc sm_90a + SASS

COMPILE_CASES = [
    (1, {}),  # defaults
    (64, {}),
    (64, {"BLOCK_N": 128, "CHUNK_TOKENS": 4096, "NUM_WARPS": 8, "STAGES": 4}),  # STAGES clamped to 3 by smem
    (1, {"BLOCK_N": 32, "CHUNK_TOKENS": 128, "NUM_WARPS": 2, "STAGES": 2}),
    (64, {"BLOCK_N": 64, "STAGES": 3, "CLUSTER": 16, "ONE_REQUEST_SCALARS": 1}),  # the cluster merge
    (1, {"CLUSTER": 2}),
]


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is not installed")
@pytest.mark.parametrize("page_size, params", COMPILE_CASES,
                         ids=[f"ps{p}-" + "-".join(f"{k}{v}" for k, v in c.items()) for p, c in COMPILE_CASES])
def test_kernel_compiles_for_sm90a_with_hmma_and_no_spills(gqa, template, tmp_path, page_size, params):
    params = {**template.defaults, **params, "PAGE_SIZE": page_size}
    kernel = string_constant(render_skill_template(gqa, template, params), "KERNEL_SRC")
    (tmp_path / "kernel.cu").write_text(kernel)
    cubin = tmp_path / "kernel.cubin"
    completed = subprocess.run([NVCC, "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v",
                                "-o", str(cubin), str(tmp_path / "kernel.cu")],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in completed.stderr, completed.stderr
    tool = find_disassembler()
    if tool is None:
        pytest.skip("no cuobjdump or nvdisasm to read the SASS")
    kernels, notes = disassemble([cubin], tool)
    (sass,) = [k for k in kernels if k.name == "gqa_mma_split_kv_fused"]
    assert sass.arch.startswith("sm_90")
    ops = sass.bases()
    # QK^T: 8 k-steps of 16 dims; PV: 8 row tiles of 16 dims; one HMMA.16816 each per 16-token row tile
    hmma = {op: n for op, n in sass.opcodes.items() if op.startswith("HMMA")}
    assert sum(hmma.values()) == 16 and all(".16816.F32.BF16" in op for op in hmma), hmma
    assert ops["LDSM"] == 16  # 8 ldmatrix.x4 (K) and 8 ldmatrix.x4.trans (V) per row tile
    assert ops["LDGSTS"] > 0  # cp.async
    assert ops["ATOMG"] >= 2  # the counter's add and reset
    assert ops["HGMMA"] == 0  # mma.sync, not wgmma
    if params["CLUSTER"] > 1:  # two cluster barriers (arrive + wait each) and loads from other CTAs' shared memory
        assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2, ops
        assert ops["LD"] >= 3 * params["CLUSTER"], ops  # generic loads: (m, l, acc) from every CTA of the cluster
    else:
        assert not any("CGABAR" in op for op in ops), ops


MERGE_CASES = [(64, {"CLUSTER": 1, "STAGES": 3, "BLOCK_N": 64}), (64, {"CLUSTER": 16, "STAGES": 3, "BLOCK_N": 64}),
               (1, {"CLUSTER": 8, "NUM_WARPS": 8})]
_SASS_OP = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)", re.M)
_FLOAT_MATH = ("FMNMX", "FADD", "FFMA", "FMUL", "MUFU", "FSETP", "FSEL")


def load_bursts(ops: list[str], is_load) -> list[int]:
    """Lengths of the runs of loads that no floating-point instruction interrupts (integer address arithmetic may)."""
    runs, current = [], 0
    for op in ops:
        if is_load(op):
            current += 1
        elif op.startswith(_FLOAT_MATH) and current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is not installed")
@pytest.mark.parametrize("page_size, params", MERGE_CASES, ids=[f"ps{p}-cluster{c['CLUSTER']}" for p, c in MERGE_CASES])
def test_the_merges_have_a_batch_of_loads_in_flight(gqa, template, tmp_path, page_size, params):
    """H100 run 25: a merge written as a chain (load a partial, fold it in, load the next) compiled to loads three at
    a time, each waiting on the last fold: at 64 partials batch 1 took 167 us. Loads first, then the fold: the last
    CTA's merge issues kMergeBatch partials' loads (m, l and the thread's dims) before any floating-point use, and
    the cluster merge every rank's (predicated, no early exit: a `break` in the unrolled loop serialised it too)."""
    params = {**template.defaults, **params, "PAGE_SIZE": page_size}
    kernel = string_constant(render_skill_template(gqa, template, params), "KERNEL_SRC")
    (tmp_path / "kernel.cu").write_text(kernel)
    cubin = tmp_path / "kernel.cubin"
    completed = subprocess.run([NVCC, "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-o", str(cubin),
                                str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    tool = find_disassembler()
    if tool is None or tool[0] != "cuobjdump":
        pytest.skip("no cuobjdump to list the SASS in order")
    listing = subprocess.run([tool[1], "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    ops = _SASS_OP.findall(listing)
    counter_add = next(i for i, op in enumerate(ops) if op.startswith("ATOMG.E.ADD"))
    batch = int(re.search(r"kMergeBatch = (\d+)", kernel).group(1))
    last_cta = load_bursts(ops[counter_add:], lambda op: op.startswith("LDG"))
    assert max(last_cta) >= 3 * batch, last_cta  # m, l and at least one dim per partial of the batch
    if params["CLUSTER"] > 1:
        barrier = next(i for i, op in enumerate(ops) if op.startswith("UCGABAR_WAIT"))
        on_chip = load_bursts(ops[barrier:counter_add], lambda op: op == "LD" or op.startswith("LD."))
        assert max(on_chip) >= 3 * params["CLUSTER"] - 3, on_chip  # (m, l, acc) of every rank, near enough
