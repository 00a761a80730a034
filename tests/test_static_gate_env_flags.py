"""Branches under an environment flag no worker has (harness.audits.static_gate.python_env_flags): a contestant's
opt-in profiling path (CUDA events under `if _PROFILE:`, real contestants' idiom) blocks nothing; every doubt keeps
code live, so nothing that can run is hidden from the gate."""

from __future__ import annotations


import pytest

from harness.audits.static_gate import builtin_policy, scan_sources
from harness.audits.static_gate.policy import awaits_attribution, in_code_never_run
from harness.audits.static_gate.python_env_flags import DEAD_BRANCH_NOTE, dead_branches
from harness.sandbox.environment_filter import never_in_worker, passes
from sandbox_attacks import HONEST
from support import submit_triton_cli

HEAD = "import os\nimport torch\n"


def lines_of(source: str, marker: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), 1) if marker in line}


def dead_lines(source: str, others: dict[str, str] | None = None) -> set[int]:
    spans = dead_branches({"kernel.py": source, **(others or {})}, ["kernel.py::run"]).get("kernel.py", [])
    return {i for first, last in spans for i in range(first, last + 1)}


DEAD = [  # each line marked DEAD never runs in a worker; each marked LIVE does
    HEAD + "_PROFILE = os.environ.get('FIB_PROFILE', '0') == '1'\ndef run(q):\n    if _PROFILE:\n"
           "        e = torch.cuda.Event(enable_timing=True)  # DEAD\n    return q  # LIVE\n",
    HEAD + "def run(q):\n    if os.getenv('MYKERNEL_DEBUG'):\n        print(q)  # DEAD\n    else:\n"
           "        q = q + 0  # LIVE\n    return q\n",
    HEAD + "DEBUG = int(os.environ.get('KDEBUG', '0'))\ndef run(q):\n    if DEBUG and q.numel():\n"
           "        print(q)  # DEAD\n    return q\n",
    HEAD + "P = os.environ.get('K_PROF', 'off').lower() in ('1', 'true', 'on')\ndef run(q):\n    if not P:\n"
           "        return q  # LIVE\n    print('x')  # LIVE\n",
    HEAD + "def run(q):\n    if 'K_TRACE' in os.environ:\n        print(q)  # DEAD\n    return q\n",
    # kogby's shape: a local set True only under the flag, and a helper only that branch calls
    HEAD + "_PROFILE = os.environ.get('FIB_PROFILE', '0') == '1'\n_ctx = {'n': 0}\n"
           "def _events(n):\n    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]  # DEAD\n"
           "def run(q):\n    this_call = False\n    if _PROFILE:\n        _ctx['n'] += 1  # DEAD\n"
           "        this_call = True  # DEAD\n    if this_call:\n        e0, e1 = _events(2)  # DEAD\n"
           "    out = q * 2  # LIVE\n    if this_call:\n        torch.cuda.synchronize()  # DEAD\n    return out\n",
    # from-imports
    "from os import environ, getenv\nimport torch\nA = getenv('ZDBG') == '1'\ndef run(q):\n    if A:\n"
    "        print(q)  # DEAD\n    if environ.get('ZDBG2'):\n        print(q)  # DEAD\n    return q  # LIVE\n",
]

LIVE = [  # every line marked LIVE may run: nothing is decided
    # a variable the worker may have (passed from the host, or set by the harness)
    HEAD + "def run(q):\n    if os.environ.get('TRITON_INTERPRET') == '1':\n        q = q.float()  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    if os.environ.get('CUDA_LAUNCH_BLOCKING'):\n        q = q + 1  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    if os.getenv('HOME'):\n        q = q + 1  # LIVE\n    return q\n",
    # a default that makes the flag true where the variable is absent
    HEAD + "ON = os.environ.get('K_FAST', '1') == '1'\ndef run(q):\n    if ON:\n        q = q + 1  # LIVE\n    return q\n",
    # the flag rebound: by another assignment, by a function's global, through reflection, from another file
    HEAD + "P = os.getenv('K_P') == '1'\nP = True\ndef run(q):\n    if P:\n        q = q + 1  # LIVE\n    return q\n",
    HEAD + "P = os.getenv('K_P') == '1'\ndef on():\n    global P\n    P = True\ndef run(q):\n    if P:\n"
           "        q = q + 1  # LIVE\n    return q\n",
    HEAD + "P = os.getenv('K_P') == '1'\nglobals()['P'] = True\ndef run(q):\n    if P:\n        q = q + 1  # LIVE\n"
           "    return q\n",
    # a parameter or a local of the same name shadows the flag
    HEAD + "P = os.getenv('K_P') == '1'\ndef run(q, P=True):\n    if P:\n        q = q + 1  # LIVE\n    return q\n",
    HEAD + "P = os.getenv('K_P') == '1'\ndef run(q):\n    P = q.numel() > 0\n    if P:\n        q = q + 1  # LIVE\n"
           "    return q\n",
    # a local bound to something unknown beside the constant
    HEAD + "P = os.getenv('K_P') == '1'\ndef run(q):\n    t = False\n    if q.numel():\n        t = bool(q.sum())\n"
           "    if t:\n        q = q + 1  # LIVE\n    return q\n",
    # red team of the flags: a match capture or `except ... as` rebinds; an import binds a local; a class body's
    # binding is not the function's; a nested function's parameter; a cast the module redefines
    HEAD + "P = os.getenv('K_P') == '1'\nmatch True:\n    case P:\n        pass\ndef run(q):\n    if P:\n"
           "        q = q + 1  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    on = False\n    try:\n        raise ValueError\n    except ValueError as on:\n"
           "        if on:\n            q = q + 1  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    on = False\n    import math as on\n    if on:\n        q = q + 1  # LIVE\n    return q\n",
    HEAD + "# environ\non = True\ndef run(q):\n    class C:\n        on = False\n    if on:\n"
           "        q = q + 1  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    on = False\n    def inner(on):\n        if on:\n            return q + 1  # LIVE\n"
           "    return inner(True)\n",
    HEAD + "def bool(x):\n    return True\nP = bool(os.environ.get('K_P'))\ndef run(q):\n    if P:\n"
           "        q = q + 1  # LIVE\n    return q\n",
    # a function called live by its mangled name, or by a name spelled with other Unicode forms of its letters
    HEAD + "def _K__dbg(q):\n    return q + 1  # LIVE\nP = os.getenv('K_P') == '1'\nclass K:\n    def go(q):\n"
           "        return __dbg(q)\ndef run(q):\n    if P:\n        _K__dbg(q)\n    return K.go(q)\n",
    HEAD + "def _dbg(q):\n    return q + 1  # LIVE\nP = os.getenv('K_P') == '1'\ndef run(q):\n    if P:\n"
           "        _dbg(q)\n    return _\uff44bg(q)\n",
    # the flag rebound through the module's own object; a helper called by a computed attribute name
    HEAD + "from . import kernel as me\nP = os.getenv('K_P') == '1'\nme.P = True\ndef run(q):\n    if P:\n"
           "        q = q + 1  # LIVE\n    return q\n",
    HEAD + "from . import kernel as me\nP = os.getenv('K_P') == '1'\ndef _dbg(q):\n    return q + 1  # LIVE\n"
           "def run(q):\n    if P:\n        _dbg(q)\n    return me.__getattribute__('_d' + 'bg')(q)\n",
    # `os` rebound to a stand-in whose getenv answers
    HEAD + "import types\nos = types.SimpleNamespace(getenv=lambda k: '1')\ndef run(q):\n    if os.getenv('K_P'):\n"
           "        q = q + 1  # LIVE\n    return q\n",
    # an env read of a computed name, or a call that is no env read
    HEAD + "N = 'K_' + 'P'\ndef run(q):\n    if os.environ.get(N):\n        q = q + 1  # LIVE\n    return q\n",
    HEAD + "def run(q):\n    if q.get('K_P'):\n        q = q + 1  # LIVE\n    return q\n",
]


@pytest.mark.parametrize("source", DEAD)
def test_what_runs_only_under_a_flag_no_worker_has_is_dead(source):
    dead = dead_lines(source)
    assert lines_of(source, "# DEAD") <= dead, (sorted(dead), source)
    assert not lines_of(source, "# LIVE") & dead, (sorted(dead), source)


@pytest.mark.parametrize("source", LIVE)
def test_every_doubt_keeps_code_live(source):
    assert not lines_of(source, "# LIVE") & dead_lines(source), source


def test_a_flag_another_file_names_may_be_flipped_from_there():
    source = HEAD + "P = os.getenv('K_P') == '1'\ndef run(q):\n    if P:\n        q = q + 1  # LIVE\n    return q\n"
    assert lines_of(source, "# LIVE") & dead_lines(source, {"b.py": ""})
    assert not lines_of(source, "# LIVE") & dead_lines(source, {"b.py": "import kernel\nkernel.P = True\n"})
    for flip in ("import sys\nsetattr(sys.modules['kernel'], 'P'[:1], True)\n",
                 "import kernel\nkernel.__setattr__(chr(80), True)\n", "import kernel\nvars(kernel)[chr(80)] = 1\n"):
        assert not lines_of(source, "# LIVE") & dead_lines(source, {"b.py": flip}), flip


def test_the_worker_environment_filter_and_the_gate_agree():
    for name in ("FIB_PROFILE", "MYKERNEL_DEBUG", "KDEBUG", "DEBUG"):
        assert never_in_worker(name) and not passes(name)
    for name in ("TRITON_INTERPRET", "CUDA_LAUNCH_BLOCKING", "TORCH_LOGS", "PATH", "HOME", "PYTHONPATH", "TMPDIR",
                 "CRUCIBLE_DUMP_STACKS_AFTER_S", "XDG_CACHE_HOME", "TVM_FFI_CACHE_DIR", "MAX_JOBS", ""):
        assert not never_in_worker(name), name


def test_a_finding_there_is_a_warning_that_blocks_nothing_and_awaits_no_attribution():
    source = DEAD[5]
    findings = scan_sources({"kernel.py": source}, "triton", builtin_policy())
    events = [f for f in findings if f.rule == "stream_event_graph"]
    assert events and all(f.severity == "error" for f in events)
    spans = dead_branches({"kernel.py": source}, ["kernel.py::run"])
    judged = [in_code_never_run(f, spans) for f in findings]
    assert all(f.severity == "warning" and DEAD_BRANCH_NOTE in f.message
               for f in judged if f.rule == "stream_event_graph")
    assert not any(awaits_attribution(f) for f in judged if DEAD_BRANCH_NOTE in f.message)
    live = [f for f in judged if f.line in lines_of(source, "# LIVE")]
    assert all(DEAD_BRANCH_NOTE not in f.message for f in live)


def test_a_source_that_does_not_parse_decides_nothing():
    assert dead_branches({"kernel.py": DEAD[0]}) != {}
    assert dead_branches({"kernel.py": DEAD[0], "b.py": "def (:\n"}) == {}


def test_an_opt_in_profiling_path_leaves_an_honest_kernel_promotable(tiny_dataset_root, tmp_path):
    """Through `harness submit` on this CPU host: the honest Triton kernel with CUDA events timing it under a flag."""
    source = HONEST.replace(
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n",
        "_PROFILE = os.environ.get('KERNEL_PROFILE', '0') == '1'\n\n\n"
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
        "    if _PROFILE:\n        start = torch.cuda.Event(enable_timing=True)\n        start.record()\n")
    source = "import os\n" + source
    assert "    if _PROFILE:\n" in source
    result = submit_triton_cli(source, "profiled", tmp_path, tiny_dataset_root, ("tiny_b2_t40",))
    events = [f for f in result["static_findings"] if f["rule"] == "stream_event_graph"]
    assert events and all(f["severity"] == "warning" and DEAD_BRANCH_NOTE in f["message"] for f in events)
    assert result["status"] == "PASSED" and result["promotable"] is True, result["promotion_blockers"]
