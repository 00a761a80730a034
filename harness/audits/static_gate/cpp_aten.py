"""ATen compute in C/C++/CUDA text (rule torch_compute): qualified ``at::``/``torch::`` calls, the same functions called
unqualified where C++ finds them anyway, and tensor methods.

An unqualified ``matmul(a, b)`` on ``at::Tensor`` arguments is ``at::matmul``: argument-dependent lookup searches the
arguments' namespace (red team round 7: attention written as ``softmax(matmul(q, transpose(k, 1, 2)), -1)`` in a
load_inline source had no finding), and so does ``using namespace at;`` or ``torch;``. Such a call is judged as its
qualified spelling where the text is bound to torch (a torch/ATen/c10 header, a qualified name of theirs, a tensor
type) and the solution defines no function of that name itself: honest kernels define ``__device__ float softmax(...)``
or ``silu(...)`` helpers, and a call of one of those is the solution's own. Only ATen names that no C, C++ or CUDA
standard header also declares are matched (``exp``, ``sqrt``, ``max``, ``sort`` and ``norm`` are those headers' too,
and ``std::sort`` is found by the same lookup on iterators)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .common import _is_word_char

if TYPE_CHECKING:
    from .policy import _CompiledPolicy

CALL_RE = re.compile(r"((?:at|torch)::(?:\w+::)*\w+)\s*(?:<[^;(){}<>]*>\s*)?\(")
# at::/torch:: calls that are never compute, whatever the policy's cpp_calls allow-list says: allocation, tensor
# options and metadata, at::cuda (current stream, device guards, device properties), and registration of the
# solution's own operators (`m.def("op(...)", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(f)))`: it names a
# kernel for the dispatcher, it runs nothing).
NEVER_COMPUTE = frozenset(f"{ns}::{name}" for ns in ("at", "torch") for name in (
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "from_blob", "device", "dtype", "TensorOptions", "elementSize", "ceil_div", "device_of", "scalarTypeToTypeMeta",
    "typeMetaToScalarType", "toString", "dispatch", "schema", "wrap_pybind_function", "CppFunction"))
NEVER_COMPUTE_PREFIXES = ("at::cuda::", "torch::cuda::", "torch::CppFunction::")
# ATen's kernels called by their backend's or ATen's internal name (`at::cpu::bmm`, `at::native::softmax`,
# `at::_ops::mm::redispatch`) never pass through the dispatcher, where the CPU's run-time attribution counts library
# operators (red team round 8: attention by `at::cpu::` calls in a load_inline source read 0%): nothing at run time
# can settle such a call, so its finding blocks (scan_sources makes a torch_compute warning with this note an error).
_PAST_DISPATCHER_NAMESPACE = r"(?:at|torch)::(?:cpu|native|meta|_ops|redispatch|composite\w*)"
PAST_DISPATCHER_RE = re.compile(_PAST_DISPATCHER_NAMESPACE + "::")  # a call's qualified name
PAST_DISPATCHER_NOTE = " past the dispatcher, where no run-time attribution sees it"
_PAST_DISPATCHER_NAMED_RE = re.compile(_PAST_DISPATCHER_NAMESPACE + r"\b")  # the namespace named: using, aliases
METHOD_RE = re.compile(
    r"(?:\.|->)\s*(matmul|mm|bmm|addmm|baddbmm|einsum|softmax|log_softmax|scaled_dot_product_attention|"
    r"index_select|masked_fill|topk|sort|argsort|sum|mean|amax|amin|max|min|logsumexp|exp|exp2|cumsum|argmax|"
    r"argmin|mul|div|tanh|sigmoid|relu|gelu|silu|norm|sqrt|rsqrt|prod|var|std|scatter|scatter_add|index_add|"
    r"gather|outer|dot|addmm_|baddbmm_|mul_|div_|exp_|softmax_|"
    # reductions and scatters by other names (`x.sum_to_size(...)` sums as `.sum()` does), fused arithmetic
    r"sum_to_size|nansum|cumprod|logcumsumexp|kthvalue|masked_scatter|masked_select|index_copy|index_fill|"
    r"index_put_|index_reduce|scatter_reduce|addcmul|addcdiv|lerp|addmv|addbmm|mv|tensordot|softplus|"
    r"repeat_interleave)\s*\(")
# ATen compute functions by names that are ATen's alone (see the module docstring for what is left out and why).
_UNQUALIFIED_NAMES = (
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "einsum", "tensordot", "chain_matmul",
    "linear", "bilinear", "softmax", "log_softmax", "logsumexp", "scaled_dot_product_attention", "layer_norm",
    "group_norm", "batch_norm", "rms_norm", "embedding", "embedding_bag", "conv1d", "conv2d", "conv3d",
    "index_select", "index_add", "index_copy", "index_fill", "index_put", "index_reduce", "masked_fill",
    "masked_scatter", "masked_select", "topk", "argsort", "argmax", "argmin", "cumsum", "cumprod", "logcumsumexp",
    "kthvalue", "amax", "amin", "nansum", "sum", "mean", "prod", "var_mean", "std_mean", "scatter", "scatter_add",
    "scatter_reduce", "gather", "sigmoid", "relu", "gelu", "silu", "softplus", "hardswish", "mish", "searchsorted",
    "bucketize", "repeat_interleave", "where", "cat", "stack", "tril", "triu", "cross_entropy", "nll_loss")
_UNQUALIFIED_RE = re.compile(rf"(?:{'|'.join(sorted(_UNQUALIFIED_NAMES, key=len, reverse=True))})\s*\(")
# The same functions named qualified and not called there (`auto f = &at::matmul;`, `using at::softmax;`): taken to
# be called by another name, which no rule would see
_TAKEN_RE = re.compile(rf"(?:at|torch)::(?:{'|'.join(sorted(_UNQUALIFIED_NAMES, key=len, reverse=True))})\b"
                       r"(?!\s*[(<])")
# What makes a text's unqualified calls reach ATen: its headers, its names, its tensor type.
_TORCH_BOUND_RE = re.compile(r"#[ \t]*include[ \t]*[<\"](?:torch|ATen|c10)/|\b(?:at|torch|c10)::|\bTensor\b")
# `<type> name(`: a declaration or definition of a function of the solution's own: a word that is not a keyword a
# call can follow (or a template's closing `>`) before the name, pointers and references between, and then a body or
# typed parameters (`float softmax(float x)`), which `scale * softmax(s, -1)` has not
_DEFINITION_RE = re.compile(r"(\w+|>)[\s*&]+(\w+)\s*\(")
_NOT_A_TYPE = frozenset({"return", "else", "do", "case", "if", "while", "for", "switch", "throw", "new", "delete",
                         "sizeof", "co_return", "co_await", "co_yield", "goto", "and", "or", "not", "def", "lambda",
                         "class", "struct", "operator"})
_BODY_RE = re.compile(r"\s*(?:(?:const|noexcept|override|final|volatile)\b\s*)*(?:->[^;{]*)?\{")
_TYPED_PARAMETER_RE = re.compile(r"^[\w:<>,\s*&]*[\w>*&][\s*&]+\w+\s*(?:\[[^\]]*\])?\s*(?:=.*)?$", re.DOTALL)


def _closing(text: str, open_at: int) -> int:
    """Offset of the ')' that closes the '(' at ``open_at``, or -1."""
    depth = 0
    for i in range(open_at, min(len(text), open_at + 4000)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _declares(text: str, m: re.Match[str]) -> bool:
    close = _closing(text, m.end() - 1)
    if close < 0:
        return False
    if _BODY_RE.match(text, close + 1):
        return True
    parameters = [p.strip() for p in text[m.end():close].split(",")]
    return parameters != [""] and all(_TYPED_PARAMETER_RE.match(p) for p in parameters)


def defined_functions(texts: Iterable[str]) -> frozenset[str]:
    """Names of ATen functions that ``texts`` (the solution's sources: C++ files, and Python ones for the C++ their
    strings hold) declare or define as functions of their own."""
    names = set()
    for text in texts:
        if not _UNQUALIFIED_RE.search(text):
            continue
        for m in _DEFINITION_RE.finditer(text):
            if m.group(2) in _UNQUALIFIED_NAMES and m.group(1) not in _NOT_A_TYPE and _declares(text, m):
                names.add(m.group(2))
    return frozenset(names)


def _previous(code: str, start: int) -> str:
    """The two characters before ``start``, blanks skipped."""
    i = start - 1
    while i >= 0 and code[i] in " \t\n\r":
        i -= 1
    return code[max(i - 1, 0):i + 1]


def _qualified_here(code: str, start: int) -> bool:
    """The `at::`/`torch::` at ``start`` is ATen's: not part of `c10::at::` or `my_at::` (but `::at::matmul` is)."""
    global_scope = code[max(start - 2, 0):start] == "::" and (start < 3 or not _is_word_char(code[start - 3]))
    return start == 0 or global_scope or not (_is_word_char(code[start - 1]) or code[start - 1] == ":")


def aten_hits(code: str, policy: _CompiledPolicy, defined: frozenset[str]) -> Iterator[tuple[int, str, str]]:
    """(offset, token, what) of each ATen call in ``code`` (comments and strings blanked). ``defined``: function
    names the solution defines elsewhere (its other files), on top of those this text defines."""
    for m in CALL_RE.finditer(code):
        name = m.group(1)
        if _qualified_here(code, m.start()) and not (
                name in NEVER_COMPUTE or name.startswith(NEVER_COMPUTE_PREFIXES) or policy.cpp_calls(name)):
            past = PAST_DISPATCHER_NOTE if PAST_DISPATCHER_RE.match(name) else ""
            yield m.start(), name, (f"calls `{name}` (ATen/torch compute, not an allocation/metadata/stream helper nor "
                                    f"on the policy's cpp_calls allow-list){past}")
    called = {m.start() for m in CALL_RE.finditer(code)}
    for m in _PAST_DISPATCHER_NAMED_RE.finditer(code):  # `using namespace at::cpu;`, `namespace a = at::native;`
        if m.start() not in called and _qualified_here(code, m.start()) and not policy.cpp_calls(m.group(0)):
            what = f"names `{m.group(0)}`, ATen's kernels by an internal name,"
            yield m.start(), m.group(0), what + PAST_DISPATCHER_NOTE
    for m in _TAKEN_RE.finditer(code):
        name = m.group(0)
        if _qualified_here(code, m.start()) and not policy.cpp_calls(name):
            yield m.start(), name, f"takes `{name}` without calling it (ATen/torch compute, called by another name)"
    for m in METHOD_RE.finditer(code):
        yield m.start(1), m.group(1), f"calls tensor method `.{m.group(1)}()`"
    if _UNQUALIFIED_RE.search(code) is None or _TORCH_BOUND_RE.search(code) is None:
        return
    own = defined | defined_functions([code])
    for m in _UNQUALIFIED_RE.finditer(code):
        start, name = m.start(), m.group(0).rstrip("( \t\n\r")
        before = _previous(code, start)
        if name in own or (start > 0 and _is_word_char(code[start - 1])) or before[-1:] in (".", ":") \
                or before == "->":
            continue  # the solution's own function, a longer name, a method, a qualified name (std::, ::, mine::)
        qualified = f"at::{name}"
        if not policy.cpp_calls(qualified) and not policy.cpp_calls(f"torch::{name}"):
            yield start, name, (f"calls `{name}` unqualified, which finds `{qualified}` (argument-dependent lookup "
                                f"on a tensor, or `using namespace`) and no function of the solution's own (ATen/torch "
                                f"compute, not on the policy's cpp_calls allow-list)")
