"""The build files a library's builder writes, and what a candidate's flags can put into one
(harness/sandbox/build_file_check.py; red team rounds 10 and 10b)."""

from __future__ import annotations

import pytest

from harness.sandbox.build_file_check import problem

_FLASHINFER = """ninja_required_version = 1.3
name = batch_decode
cuda_home = /usr/local/cuda
cxx = c++
nvcc = $cuda_home/bin/nvcc
cxx_launcher =
nvcc_launcher =

common_cflags = -DTORCH_EXTENSION_NAME=$name -DPy_LIMITED_API=0x03090000 $
  -isystem $cuda_home/include -isystem /opt/flashinfer/include
cflags = $common_cflags -O3 -std=c++17 -fPIC
post_cflags =
cuda_cflags = $common_cflags --compiler-options=-fPIC -gencode=arch=compute_90a,code=sm_90a -O3
cuda_post_cflags =
ldflags = -shared -L$cuda_home/lib64 -L$cuda_home/lib64/stubs -lcudart -lcuda

rule compile
  command = $cxx_launcher $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
  depfile = $out.d
  deps = gcc

rule cuda_compile
  command = $nvcc_launcher $nvcc --generate-dependencies-with-compile -MF $out.d $cuda_cflags -c $in -o $out
  depfile = $out.d
  deps = gcc

rule link
  command = $cxx $in $ldflags -o $out

build /cache/batch_decode/decode.cuda.o: cuda_compile /opt/flashinfer/csrc/decode.cu
build /cache/batch_decode/batch_decode.so: link /cache/batch_decode/decode.cuda.o
default /cache/batch_decode/batch_decode.so
"""

_TVM_FFI = """ninja_required_version = 1.3
cxx = c++
cxxflags = -std=c++17 -fPIC -O2 -I/opt/tvm_ffi/include -I/w/a$:b
nvcc = /usr/local/cuda/bin/nvcc
cuda_cflags = -Xcompiler -fPIC -std=c++17 -O2 -gencode=arch=compute_90,code=sm_90
ldflags = -shared -L/opt/tvm_ffi/lib -ltvm_ffi -L/usr/local/cuda/lib64 -lcudart

rule compile
  depfile = $out.d
  deps = gcc
  command = $cxx -MMD -MF $out.d $cxxflags -c $in -o $out

rule compile_cuda
  depfile = $out.d
  deps = gcc
  command = $nvcc  --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags -c $in -o $out

rule merge_objects
  command = ld -r -o $out $in

rule link
  command = $cxx $in $ldflags -o $out

build main.o: compile /w/a$:b/main.cpp
build kernel.cuda.o: compile_cuda /w/a$:b/kernel.cu
build ext.so: link main.o kernel.cuda.o
default ext.so
"""


def _torch_file(tmp_path, extra_cflags=(), extra_cuda_cflags=(), with_cuda=False) -> str:
    from torch.utils import cpp_extension

    sources = [tmp_path / "main.cpp"] + ([tmp_path / "k.cu"] if with_cuda else [])
    for s in sources:
        s.write_text("int x;")
    cpp_extension._write_ninja_file_to_build_library(
        path=str(tmp_path / "build.ninja"), name="ext", sources=[str(s) for s in sources],
        extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags), extra_sycl_cflags=[],
        extra_ldflags=["-lcuda"] if with_cuda else [], extra_include_paths=[str(tmp_path)], with_cuda=with_cuda,
        with_sycl=False, is_standalone=False)
    return (tmp_path / "build.ninja").read_text()


def test_the_builders_own_files_pass(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/usr/local/cuda")  # a CPU torch has none; the text is the same
    honest = ["-O3", '-DVERSION="1.0"', "-Wl,-Bsymbolic", "-I/opt/inc"]
    assert problem(_torch_file(tmp_path, honest)) == ""
    cuda = ["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo", "-ccbin", "g++"]
    assert problem(_torch_file(tmp_path, honest, cuda, with_cuda=True)) == ""
    assert problem(_FLASHINFER) == ""
    assert problem(_TVM_FFI) == ""


_INJECTED = [
    ("backticks", "-O2 `python3 -c 'print(1)'`", "shell syntax"),
    ("a second command", "-O2; id", "shell syntax"),
    ("an escaped substitution", "-O2 $$(id)", "shell syntax"),
    ("a rule of its own (10b)", "-O2\nrule rt\n  command = id\nbuild rt.txt: rt\ndefault rt.txt", "a rule of its own"),
    ("a build statement's own command", "-O2\nbuild x.o: compile main.cpp\n  command = python3 -c pass",
     "a command of a build statement's own"),
    ("a phony build of its own", "-O2\nbuild always: phony\ndefault always", ""),  # nothing runs: harmless
    ("an include", "-O2\ninclude /tmp/evil.ninja", "`include`"),
    ("a subninja", "-O2\nsubninja /tmp/evil.ninja", "`subninja`"),
    ("an indented line", "-O2\n  command = id", "a line no builder writes"),
    ("gcc's wrapper", "-wrapper python3,-c,pass", "runs another program"),
    ("a plugin", "-fplugin=/tmp/p.so", "runs another program"),
    ("another toolchain folder", "-B/tmp/bin", "runs another program"),
    ("nvcc's host compiler elsewhere", "-ccbin /tmp/cc", "runs another program"),
    ("nvcc's host compiler by path", "-ccbin=/usr/bin/gcc", ""),
]


@pytest.mark.parametrize("name,flag,why", _INJECTED, ids=[n for n, _, _ in _INJECTED])
def test_what_a_flag_puts_into_the_file_is_refused(tmp_path, name, flag, why):
    got = problem(_torch_file(tmp_path, ["-O3", flag]))
    assert (why in got) if why else got == "", (name, got)


@pytest.mark.parametrize("line,why", [
    ("cxx = python3 -c pass", "no known compiler"),
    ("cxx = /tmp/my-cc", "no known compiler"),
    ("cxx = /tmp/c++", "no known compiler"),  # a compiler's name on a program of the candidate's
    ("cxx = /usr/bin/g++-12", ""),
    ("cxx = clang++-18", ""),
    ("cxx = ccache c++", ""),  # torch's wrapper where ccache is installed
    ("cxx = ccache /tmp/c++", "no known compiler"),
    ("nvcc = sccache '/usr/local/cuda 13/bin/nvcc'", ""),
    ("nvcc = /usr/local/cuda/bin/nvcc", ""),
])
def test_the_program_variables_name_a_compiler(line, why):
    text = _FLASHINFER.replace("nvcc = $cuda_home/bin/nvcc", line) if line.startswith("nvcc") else \
        _FLASHINFER.replace("cxx = c++", line)
    got = problem(text)
    assert (why in got) if why else got == "", got
