"""A Python solution that builds its own native module at import with TVM-FFI (``tvm_ffi.cpp.load_inline``,
``build_inline``, ``load``, ``build``) is handled as one built with torch's ``load_inline``: it builds in a folder of
its worker's own (``TVM_FFI_CACHE_DIR``, never the shared ``~/.cache/tvm-ffi``), the library it made is disassembled
for the SASS audit, and the build folder is kept for the same solution's next worker and no other's
(harness/sandbox/extension_cache.py). tvm_ffi cannot be imported on the CPU test host (its wheel is for another
Python): the pieces are tested with files laid out as tvm_ffi lays them out, and the real build on a GPU host."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile
import types

import pytest

from harness.sandbox.build import Built, extension_binaries
from harness.sandbox.extension_cache import extension_folders, pack, unpack
from harness.sandbox.runner import scrubbed_environment

from support import KV8_PS1, ROOT

PROBE_NAME = "crucible_tvm_probe"


def _tvm_ffi_build(cache, tag="x"):
    """A build folder as ``tvm_ffi.cpp.build_inline`` leaves it: ``CACHE/NAME_HASH/`` with its sources, ninja's
    files, objects, the library, and its file lock (not a build file)."""
    folder = cache / f"{PROBE_NAME}_0123abcd"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in [("main.cpp", tag), ("cuda.cu", tag), ("build.ninja", "rule compile\n"), ("cpp_0.o", "\x7fELF"),
                       ("cuda_0.o", "\x7fELF"), ("cuda_0.o.d", "deps"), (".ninja_log", "# ninja log v5\n"),
                       (f"{PROBE_NAME}.so", tag), ("lock", "")]:
        (folder / name).write_text(text)
    os.utime(folder / "cuda_0.o", ns=(1_700_000_000_987_654_321, 1_700_000_000_987_654_321))
    return folder


def _torch_build(folder):
    (folder / "torch_probe").mkdir(parents=True, exist_ok=True)
    (folder / "torch_probe" / "torch_probe.so").write_text("torch")
    return folder / "torch_probe" / "torch_probe.so"


def test_each_worker_builds_tvm_ffi_modules_in_a_folder_of_its_own(tmp_path, monkeypatch):
    """The worker's environment names its TVM-FFI build folder under its own home, beside torch's; the host's
    setting (a shared cache) never reaches it, and two workers never share one."""
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / "shared"))
    a, b = (scrubbed_environment(home=tmp_path / name) for name in ("a", "b"))
    assert a["TVM_FFI_CACHE_DIR"] == str(tmp_path / "a" / ".tvm_ffi") != b["TVM_FFI_CACHE_DIR"]
    assert a["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "a" / ".torch_extensions")
    assert str(tmp_path / "shared") not in a.values()
    assert extension_folders(tmp_path / "a", a) == {"torch": tmp_path / "a" / ".torch_extensions",
                                                    "tvm-ffi": tmp_path / "a" / ".tvm_ffi"}


def test_reading_where_tvm_ffi_builds_is_environment_probing(policy):
    """As reading TORCH_EXTENSIONS_DIR is: the folder is the harness's (the worker's home), not a build setting."""
    from static_gate_support import describe, scan_py

    findings = scan_py("import os\nfolder = os.environ.get('TVM_FFI_CACHE_DIR')\n", policy)
    assert [(f.rule, f.severity, f.line) for f in findings] == [("env_probe", "error", 2)], describe(findings)


def test_the_sass_audit_gets_the_library_tvm_ffi_built(tmp_path, monkeypatch):
    """``extension_binaries`` lists what TVM-FFI built beside torch's extensions, and the worker's SASS reply hands
    both to the disassembler."""
    from harness.audits import sass
    from harness.sandbox.worker import _sass_reply

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / ".torch_extensions"))
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / ".tvm_ffi"))
    torch_so = _torch_build(tmp_path / ".torch_extensions")
    tvm_so = _tvm_ffi_build(tmp_path / ".tvm_ffi") / f"{PROBE_NAME}.so"
    assert extension_binaries() == {"so:torch_probe/torch_probe.so": str(torch_so),
                                    f"so:tvm-ffi/{PROBE_NAME}_0123abcd/{PROBE_NAME}.so": str(tvm_so)}
    given = []
    monkeypatch.setattr(sass, "find_disassembler", lambda: ("/bin/true", "cuobjdump"))
    monkeypatch.setattr(sass, "disassemble", lambda files, tool, timeout_s=None: (given.extend(files), ([], []))[1])
    solution = types.SimpleNamespace(spec=types.SimpleNamespace(language=types.SimpleNamespace(value="python")))
    import torch

    header, _ = _sass_reply(Built(fn=None), solution, torch.device("cpu"), tmp_path, 10.0)
    assert header["ok"] and sorted(given) == sorted([torch_so, tvm_so]), (header, given)
    assert f"{PROBE_NAME}.so" in header["files"]


def test_a_tvm_ffi_build_that_fails_without_a_gpu_is_skipped_as_torchs_is(tmp_path, monkeypatch):
    """On a host without a GPU, a build that failed inside tvm_ffi.cpp (here a stand-in for the package, raising
    what tvm_ffi raises where it finds no GPU to build for) says so, never a COMPILE_ERROR."""
    from harness.data.schema import Definition, Solution, load_model
    from harness.sandbox.build import build

    from support import DEFINITIONS, solution_dict

    fake = tmp_path / "site" / "tvm_ffi" / "cpp"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("from .extension import load_inline\n")
    (fake / "extension.py").write_text("def load_inline(name, **kwargs):\n    raise RuntimeError('Could not detect "
                                       "CUDA compute_cap automatically. Please set TVM_FFI_CUDA_ARCH_LIST')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    saved = {m: sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == "tvm_ffi"}
    source = "import tvm_ffi.cpp\n\n_ext = tvm_ffi.cpp.load_inline('k', cuda_sources='', functions=['f'])\n"
    definition = load_model(Definition, DEFINITIONS / "definitions" / "gqa_paged" / f"{KV8_PS1}.json")
    try:
        built = build(Solution.model_validate(solution_dict(source)), definition, tmp_path / "work", have_gpu=False)
    finally:  # the stand-in leaves with this test
        for name in [m for m in sys.modules if m.split(".")[0] == "tvm_ffi"]:
            del sys.modules[name]
        sys.modules.update(saved)
    assert built.compile_only and built.fn is None
    assert built.note.startswith("a TVM-FFI CUDA extension") and "TVM_FFI_CUDA_ARCH_LIST" in built.log


def test_one_kept_copy_carries_both_builders_folders(tmp_path):
    """torch's and TVM-FFI's folders travel in one copy, each back into its own folder with its build files and
    their times (not the lock); a member of the copy cannot leave its folder for the other's, and a member under no
    folder's label (a copy of the older layout) is left out."""
    first = extension_folders(tmp_path / "first", {})
    _torch_build(first["torch"])
    _tvm_ffi_build(first["tvm-ffi"])
    data, what = pack(first)
    assert data is not None and what.startswith("9 files"), what
    again = extension_folders(tmp_path / "again", {})
    assert unpack(data, again) == 9
    names = sorted(p.relative_to(again["tvm-ffi"]).as_posix() for p in again["tvm-ffi"].rglob("*") if p.is_file())
    built = f"{PROBE_NAME}_0123abcd"
    assert names == sorted(f"{built}/{n}" for n in (".ninja_log", "build.ninja", "cpp_0.o", "cuda.cu", "cuda_0.o",
                                                    "cuda_0.o.d", f"{PROBE_NAME}.so", "main.cpp"))
    assert (again["torch"] / "torch_probe" / "torch_probe.so").read_text() == "torch"
    assert os.stat(again["tvm-ffi"] / built / "cuda_0.o").st_mtime_ns == 1_700_000_000_987_654_321

    def forged(*members):
        with tarfile.open(tmp_path / "forged.tar", mode="w") as tar:
            for member in members:
                info = tarfile.TarInfo(member)
                info.size = 4
                tar.addfile(info, io.BytesIO(b"evil"))
        return (tmp_path / "forged.tar").read_bytes()

    box = extension_folders(tmp_path / "box", {})
    with pytest.raises(tarfile.FilterError):
        unpack(forged("tvm-ffi/../.torch_extensions/x.so"), box)
    assert unpack(forged("probe/probe.so", "/tvm-ffi/x.so", "other/x.so"), box) == 0
    assert not [p for p in (tmp_path / "box").rglob("*") if p.is_file()]


# Where tvm_ffi.cpp.load_inline builds when it is given no build_directory (tvm_ffi/cpp/extension.py): the build
# files a load_inline leaves, written as it writes them (tvm_ffi itself cannot be imported on the CPU test host).
LIKE_TVM_FFI = '''import os
from pathlib import Path

cache = Path(os.environ.get("TVM_FFI_CACHE_DIR", str(Path("~/.cache/tvm-ffi").expanduser())))
seen = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else []
print("tvm-ffi builds in:", cache.name, Path.home() in cache.parents)
print("found at import:", seen)
build = cache / "crucible_tvm_probe_0123abcd"
build.mkdir(parents=True, exist_ok=True)
for name in ("main.cpp", "build.ninja", "cpp_0.o", "crucible_tvm_probe.so", "lock"):
    (build / name).write_text("TAG")
'''


def _with_probe(name, probe):
    base = json.loads((ROOT / "examples" / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json").read_text())
    base["name"] = name
    base["sources"][0]["content"] = "from . import probe  # noqa: F401\n" + base["sources"][0]["content"]
    base["sources"].append({"path": "probe.py", "content": probe})
    return base


def _build_log(archive, result):
    from harness.archive.queries import artifact_rows

    (log,) = [r for r in artifact_rows(archive.db, result.submission_id) if r["kind"] == "build_log"]
    return archive.get_blob(log["blob"]).decode()


def test_a_tvm_ffi_build_is_kept_for_the_same_solution_only(tiny_dataset_root, tmp_path):
    """Through the harness on CPU: a solution whose import builds where tvm_ffi builds finds, in its second
    evaluation, what its first built, put back in its worker's own folder; another solution (one byte changed) finds
    nothing."""
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    logs = []
    for tag in ("a", "a", "b"):
        solution = Solution.model_validate(_with_probe(f"tvm_ffi_{tag}", LIKE_TVM_FFI.replace("TAG", tag)))
        archive = Archive(tmp_path / "archive")
        with Session(Dataset(tiny_dataset_root), archive,
                     SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as session:
            result = session.submit(solution)
        assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
        logs.append(_build_log(archive, result))
    assert all("tvm-ffi builds in: .tvm_ffi True" in log for log in logs), logs
    found = [re.search(r"found at import: (.+)", log).group(1) for log in logs]
    kept = [f"crucible_tvm_probe_0123abcd/{n}" for n in ("build.ninja", "cpp_0.o", "crucible_tvm_probe.so",
                                                         "main.cpp")]
    assert found == ["[]", repr(kept), "[]"]
    assert "extensions put back before the import: 4 files" in logs[1]


PROBE_GPU = r'''import os

import torch
import tvm_ffi.cpp

os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", "9.0")
_ext = tvm_ffi.cpp.load_inline(name="crucible_tvm_probe", functions=["add_one", "built_at"], cuda_sources="""
__global__ void crucible_add_one_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  int n = static_cast<int>(x.size(0));
  crucible_add_one_kernel<<<(n + 127) / 128, 128>>>(static_cast<const float*>(x.data_ptr()),
                                                    static_cast<float*>(y.data_ptr()), n);
}
tvm::ffi::String built_at() { return tvm::ffi::String(__DATE__ " " __TIME__); }
""")
_x = torch.arange(256, dtype=torch.float32, device="cuda")
_y = torch.empty_like(_x)
_ext.add_one(_x, _y)
torch.cuda.synchronize()
assert torch.equal(_y, _x + 1)
print("tvm-ffi module built at", _ext.built_at(), flush=True)
'''


@pytest.mark.gpu
def test_a_tvm_ffi_cuda_module_is_audited_and_built_once(tmp_path):
    """On a GPU host, with tvm_ffi's own load_inline: the CUDA kernel it built is in the submission's SASS, and the
    second evaluation loads the first one's library (the same compile time stamp) instead of compiling again."""
    from harness.archive.database import Archive
    from harness.archive.queries import artifact_rows
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    solution = Solution.model_validate(_with_probe("tvm_ffi_gpu_probe", PROBE_GPU))
    stamps = []
    for _ in range(2):
        archive = Archive(tmp_path / "archive")
        with Session(Dataset(), archive, SubmitOptions(workloads=["uniform_b1_kv512"], timing=False,
                                                       baselines=False)) as session:
            result = session.submit(solution)
        assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
        log = _build_log(archive, result)
        stamps.append((re.search(r"tvm-ffi module built at (.+)", log).group(1), "put back before the import" in log))
        (row,) = [r for r in artifact_rows(archive.db, result.submission_id) if r["kind"] == "sass"]
        text = archive.get_blob(row["blob"]).decode()
        assert f"{PROBE_NAME}.so" in text and "crucible_add_one_kernel" in text, text
    assert stamps == [(stamps[0][0], False), (stamps[0][0], True)], stamps
