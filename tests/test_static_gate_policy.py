"""Static gate: result shape (syntax errors, ordering, JSON, warnings against errors, languages, the candidate's
own ops and modules), the layered YAML policy, and speed."""

from __future__ import annotations

import time

import pytest
import yaml

from harness.audits.static_gate import (
    DEFAULT_POLICY_PATH,
    LIBRARY_RULES,
    RULES,
    Finding,
    GatePolicy,
    PolicyError,
    awaits_attribution,
    gate_passed,
    load_policy,
    policy_from_mapping,
    scan_sources,
)

from static_gate_support import HONEST_CUDA_GQA_DECODE, HONEST_TRITON_GQA_DECODE, scan_py


# --------------------------------------------------------------------------------------------------
# Syntax errors and result shape


def test_syntax_error_is_a_single_finding_not_an_exception(policy):
    findings = scan_py("import torch\n\ndef run(q:\n    return q\n", policy)
    assert [f.rule for f in findings] == ["syntax"]
    assert findings[0].line == 3 and findings[0].severity == "error"
    assert not gate_passed(findings)


def test_findings_are_sorted_by_path_then_line(policy):
    sources = {
        "b.py": "import threading\nimport gc\n",
        "a.py": "x = 1\nimport ctypes\nimport subprocess\nlib = ctypes.CDLL('k.so')\n",
        "k.cu": "void f() {\n  cudaDeviceReset();\n}\n",
    }
    findings = scan_sources(sources, "python", policy)
    keys = [(f.path, f.line) for f in findings]
    assert keys == sorted(keys)
    assert [f.path for f in findings] == ["a.py", "a.py", "b.py", "b.py", "k.cu"]


def test_finding_round_trips_through_json(policy):
    (finding,) = scan_py("import gc\n", policy)
    assert Finding.model_validate_json(finding.model_dump_json()) == finding
    assert set(finding.model_dump()) == {"rule", "severity", "path", "line", "col", "message", "snippet"}
    assert "gc" in finding.message and "harness" in finding.message


def test_gate_passed_ignores_warnings(policy):
    warnings_only = scan_py("import torch\ns = torch.matmul(q, k)\n", policy)
    assert warnings_only and gate_passed(warnings_only)
    assert not gate_passed(scan_py("import threading\n", policy))
    assert gate_passed([])


def test_language_decides_unknown_suffixes(policy):
    hidden = {"table.inc.txt": "int x;\n", "impl.inl": "void f() { cudaDeviceReset(); }\n",
              "notes.md": "We call system( nothing ) here.\n", "payload": "void f() { system(\"ls\"); }\n"}
    cuda_rules = {(f.path, f.rule) for f in scan_sources(hidden, "cuda", policy)}
    assert cuda_rules == {("impl.inl", "device_state_tamper"), ("payload", "concurrency")}
    python_rules = {(f.path, f.rule) for f in scan_sources(hidden, "python", policy)}
    assert python_rules == {("impl.inl", "device_state_tamper")}


def test_torch_ops_registered_by_the_candidate_are_its_own(gqa_policy):
    sources = {
        "binding.cpp": "TORCH_LIBRARY(crucible_gqa, m) { m.def(\"run(Tensor q) -> Tensor\"); }\n",
        "main.py": "import torch\ndef run(q):\n    return torch.ops.crucible_gqa.run(q)\n",
    }
    assert scan_sources(sources, "cuda", gqa_policy) == []
    foreign = {"main.py": "import torch\ndef run(q):\n    return torch.ops.aten.mm(q, q)\n"}
    assert [f.rule for f in scan_sources(foreign, "python", gqa_policy)] == ["torch_compute"]


def test_candidates_own_modules_are_not_foreign(policy):
    sources = {"main.py": "import helpers\nhelpers.BLOCK = 64\n", "helpers.py": "BLOCK = 32\n"}
    assert scan_sources(sources, "python", policy) == []


# --------------------------------------------------------------------------------------------------
# Policy: YAML defaults, layering default -> op_type -> definition, allow-lists


def test_yaml_defaults_match_the_rule_catalogue():
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    defaults = data["default"]["rules"]
    assert set(defaults) == set(RULES)
    for rule_id, spec in RULES.items():
        assert defaults[rule_id]["severity"] == spec.default_severity, rule_id
    assert data["definition"] == {}


def test_shipped_policy_leaves_library_compute_to_attribution_on_every_layer():
    """No layer of the shipped policy raises torch_compute/library_fallback: they stay warnings that run-time
    attribution confirms or clears (awaits_attribution), for every op_type and definition it names."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    layers = [(None, None), ("gqa_paged", "gqa_paged_decode_h32_kv8_d128_ps1"),
              *((op, None) for op in data.get("op_type") or {}), *((None, d) for d in data.get("definition") or {})]
    for op_type, definition in layers:
        policy = load_policy(op_type=op_type, definition=definition)
        assert {policy.setting(rule).severity for rule in LIBRARY_RULES} == {"warning"}, (op_type, definition)
    gqa = load_policy(op_type="gqa_paged", definition="gqa_paged_decode_h32_kv8_d128_ps1")
    findings = scan_py("import torch\ns = torch.matmul(q, k)\n", gqa)
    assert [(f.rule, f.severity) for f in findings] == [("torch_compute", "warning")] and gate_passed(findings)
    assert all(awaits_attribution(f) and awaits_attribution(f.model_dump()) for f in findings)
    assert LIBRARY_RULES == {"torch_compute", "library_fallback"}
    # a user's policy may still make them errors, and then they do not await attribution: they block
    strict = policy_from_mapping({"op_type": {"gqa_paged": {"rules": {"torch_compute": {"severity": "error"}}}}},
                                 op_type="gqa_paged")
    findings = scan_py("import torch\ns = torch.matmul(q, k)\n", strict)
    assert not gate_passed(findings) and not any(awaits_attribution(f) for f in findings)
    assert not awaits_attribution({"rule": "stream_event_graph", "severity": "warning"})


LAYERED = {
    "default": {
        "rules": {"torch_compute": {"severity": "warning"}, "file_read": {"severity": "warning"},
                  "clock_read": {"severity": "warning"}},
        "allow": {"torch_calls": ["torch.empty"]},
    },
    "op_type": {
        "gqa_paged": {
            "rules": {"torch_compute": {"severity": "error"}, "file_read": {"severity": "error"},
                      "clock_read": {"severity": "error"}},
            "allow": {"torch_calls": ["torch.arange"]},
        },
    },
    "definition": {
        "gqa_special": {
            "rules": {"torch_compute": {"severity": "warning"}, "file_read": False},
            "allow": {"torch_calls": ["torch.cumsum"], "tensor_methods": ["sum"]},
        },
    },
}


def test_layering_definition_beats_op_type_beats_default():
    default = policy_from_mapping(LAYERED)
    op = policy_from_mapping(LAYERED, op_type="gqa_paged")
    full = policy_from_mapping(LAYERED, op_type="gqa_paged", definition="gqa_special")
    assert default.setting("torch_compute").severity == "warning"
    assert op.setting("torch_compute").severity == "error"
    assert full.setting("torch_compute").severity == "warning"  # definition wins over op_type
    assert full.setting("clock_read").severity == "error"  # op_type wins over default where definition is silent
    assert op.setting("file_read").enabled and not full.setting("file_read").enabled
    assert full.layers == ("default", "op_type:gqa_paged", "definition:gqa_special")
    # allow-lists are extended layer by layer, never replaced
    assert default.torch_calls == ("torch.empty",)
    assert full.torch_calls == ("torch.empty", "torch.arange", "torch.cumsum")
    # unknown op_type / definition names simply add nothing
    assert policy_from_mapping(LAYERED, op_type="nope", definition="nope").layers == ("default",)


def test_layered_policy_changes_what_is_reported():
    source = "import torch\nc = torch.cumsum(x, 0)\ns = x.sum()\nf = open(p)\n"
    op = policy_from_mapping(LAYERED, op_type="gqa_paged")
    full = policy_from_mapping(LAYERED, op_type="gqa_paged", definition="gqa_special")
    op_findings = scan_py(source, op)
    assert {(f.rule, f.line, f.severity) for f in op_findings} == {
        ("torch_compute", 2, "error"), ("torch_compute", 3, "error"), ("file_read", 4, "error")}
    assert scan_py(source, full) == []  # cumsum and .sum() allowed, file_read switched off


def test_load_policy_reads_a_given_file(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(LAYERED))
    policy = load_policy(path, definition="gqa_special", op_type="gqa_paged")
    assert policy.setting("torch_compute").severity == "warning"
    assert not policy.setting("file_read").enabled


def test_policy_python_names_escape_hatch():
    policy = policy_from_mapping({"definition": {"d": {"allow": {"python_names": ["torch.cuda.Event"]}}}},
                                 definition="d")
    assert scan_py("import torch\ne = torch.cuda.Event()\n", policy) == []


@pytest.mark.parametrize("bad", [
    {"default": {"rules": {"no_such_rule": {"severity": "error"}}}},
    {"default": {"rules": {"torch_compute": {"severity": "fatal"}}}},
    {"default": {"rules": {"torch_compute": {"level": "error"}}}},
    {"default": {"allow": {"no_such_list": []}}},
    {"default": {"allow": {"torch_calls": "torch.empty"}}},
    {"default": {"rulez": {}}},
    {"defaults": {}},
])
def test_malformed_policy_is_rejected(bad):
    with pytest.raises(PolicyError):
        policy_from_mapping(bad)


def test_policy_round_trips_through_json():
    policy = load_policy(op_type="gqa_paged")
    assert GatePolicy.model_validate_json(policy.model_dump_json()) == policy


# --------------------------------------------------------------------------------------------------
# Speed: the gate runs on every candidate in the agent loop (budget ~50 ms for the whole static stage).


def _lines_of(source: str, at_least: int) -> str:
    copies = -(-at_least // len(source.splitlines()))
    return "\n".join([source] * copies)


def test_scanning_2000_lines_is_fast(policy):
    from pathlib import Path

    python_source = _lines_of(HONEST_TRITON_GQA_DECODE, 2000)
    cuda_source = _lines_of(HONEST_CUDA_GQA_DECODE, 2000)
    inline = (Path(__file__).parent / "gate_corpus" / "honest" / "cuda_load_inline" / "main.py").read_text()
    inline_source = _lines_of(inline, 2000)  # C++ in load_inline strings, scanned with the C++ rules
    assert len(python_source.splitlines()) >= 2000 and len(cuda_source.splitlines()) >= 2000
    timings = {}
    for name, sources, language in (("python", {"main.py": python_source}, "triton"),
                                    ("cuda", {"main.cu": cuda_source}, "cuda"),
                                    ("load_inline", {"main.py": inline_source}, "python")):
        scan_sources(sources, language, policy)  # warm regex/compile caches
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            scan_sources(sources, language, policy)
            best = min(best, time.perf_counter() - start)
        timings[name] = best
    # Typically ~10-40 ms; the bound is loose so slow CI machines do not flake.
    assert all(seconds < 0.5 for seconds in timings.values()), timings
