"""harness.profiling on CPU, the pure part: numbers and units, ncu's CSV layouts, what went wrong (statuses from
the exit code and text), and backend selection. The subprocess path with a fake `ncu` is in test_profile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.profiling import (FAILED, NO_KERNELS, NO_PERMISSION, NVTX_INCLUDE, OK, UNAVAILABLE, KernelProfile,
                               ProfileSummary, arch_from_cc, choose_backend, diagnose, failed_metric_names,
                               finish_summary, parse_long_csv, parse_ncu_csv, parse_ncu_version, parse_number,
                               parse_raw_csv, to_base_unit)

from profile_support import CUDA_CORES_CSV, FIXTURES, METRICS, PERMISSION_TEXT, TRITON_CSV

# ---------------------------------------------------------------------------------------------
# Numbers and units


@pytest.mark.parametrize("text, value", [
    ("1,980,000", 1980000.0), ("66.72", 66.72), ("0", 0.0), ("n/a", None), ("", None), ("  12.5 ", 12.5),
    ("(256, 1, 1)", None), ("NVIDIA H200", None), (3, 3.0),
])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("value, unit, expected", [
    (14.85, "usecond", (14850.0, "ns")), (2.0, "msecond", (2e6, "ns")), (689344.0, "nsecond", (689344.0, "ns")),
    (4.23, "Mbyte", (4.23e6, "byte")), (81.92, "Kbyte", (81920.0, "byte")), (2.15, "Gbyte", (2.15e9, "byte")),
    (3.1, "Tbyte/second", (3.1e12, "byte/second")), (16.8, "Minst", (16.8e6, "inst")), (66.7, "%", (66.7, "%")),
    (91.0, "register/thread", (91.0, "register/thread")), (5.0, "block", (5.0, "block")), (2.3, "", (2.3, "")),
    (None, "usecond", (None, "ns")), (1.0, "byte/usecond", (1e6, "byte/second")),
])
def test_to_base_unit(value, unit, expected):
    got = to_base_unit(value, unit)
    assert got[1] == expected[1]
    assert got[0] == pytest.approx(expected[0]) if expected[0] is not None else got[0] is None


@pytest.mark.parametrize("cc, arch", [("9.0", "sm_90"), ("10.0", "sm_100"), ("8.9", "sm_89"), ("", None),
                                      (None, None), ("NVIDIA", None)])
def test_arch_from_cc(cc, arch):
    assert arch_from_cc(cc) == arch


# ---------------------------------------------------------------------------------------------
# CSV layouts


def _independent_read(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    import csv

    rows = list(csv.reader(path.read_text().splitlines()))
    return rows[0], rows[1], rows[2:]


def test_raw_page_parses_header_units_and_one_row_per_launch():
    kernels = parse_raw_csv(CUDA_CORES_CSV.read_text())
    header, units, rows = _independent_read(CUDA_CORES_CSV)
    assert [k.id for k in kernels] == [0, 1]
    assert kernels[0].name.startswith("void flashinfer::BatchDecodeWithPagedKVCacheKernel<")
    assert kernels[1].name.startswith("void flashinfer::VariableLengthMergeStatesKernel<")
    assert {k.cc for k in kernels} == {"9.0"} and kernels[0].block_size == "(16, 4, 1)"
    col = header.index("gpu__time_duration.sum")
    assert units[col] == "usecond" and rows[0][col] == "14.85"
    assert kernels[0].metrics["gpu__time_duration.sum"] == (pytest.approx(14850.0), "ns")
    col = header.index("dram__bytes_read.sum")
    assert units[col] == "Mbyte" and kernels[0].value("dram__bytes_read.sum") == pytest.approx(4.23e6)
    # "n/a" is a missing value, not zero; a text attribute is not a metric
    assert kernels[0].value("l1tex__t_sector_hit_rate.pct") is None
    assert "device__attribute_display_name" not in kernels[0].metrics
    assert kernels[0].value("launch__grid_size") == 128.0


def test_raw_page_skips_prof_lines_and_program_output():
    text = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\nprofile_target: profiled one call\n"
            + TRITON_CSV.read_text() + "==PROF== Disconnected from process 4242\n")
    kernels = parse_raw_csv(text)
    assert len(kernels) == 1 and kernels[0].name == "_gqa_decode_kernel"
    assert kernels[0].value("gpu__time_duration.sum") == 689344.0  # "689,344": thousands separators stripped
    assert kernels[0].value("dram__bytes_read.sum") == 2151677952.0


def test_raw_page_without_units_row_and_garbage():
    text = ('"ID","Process ID","Process Name","Host Name","Kernel Name","gpu__time_duration.sum"\n'
            '"0","1","python","h","k","1,000"\n')
    kernels = parse_raw_csv(text)
    assert kernels[0].value("gpu__time_duration.sum") == 1000.0
    assert parse_raw_csv("==ERROR== something\n") == []
    with pytest.raises(ValueError, match="Kernel Name"):
        parse_raw_csv('"a","b"\n"1","2"\n')


def test_details_page_and_nsight_python_long_format():
    kernels = parse_ncu_csv((FIXTURES / "synthetic_details_page_sm90.csv").read_text())
    assert len(kernels) == 1 and kernels[0].cc == "9.0"
    assert kernels[0].value("gpu__time_duration.sum") == pytest.approx(689340.0)
    assert kernels[0].value("dram__bytes_read.sum") == pytest.approx(2.15e9)
    nsight = ("Annotation,Value,Metric,Unit,Kernel,GPU,Host,ComputeClock,MemoryClock\n"
              "crucible_candidate,512128,gpu__time_duration.sum,nsecond,flash_kernel,NVIDIA H200,h,1980,3201\n"
              "crucible_candidate,93.12,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,%,"
              "flash_kernel,NVIDIA H200,h,1980,3201\n")
    ks = parse_long_csv(nsight)
    assert [k.name for k in ks] == ["flash_kernel"]
    assert ks[0].value("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed") == 93.12


def test_finish_summary_lists_missing_metrics_and_arch():
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=CUDA_CORES_CSV.read_text(),
                       requested_metrics=METRICS + ["sm__not_a_metric.sum"])
    s = finish_summary(s, parse_raw_csv)
    assert s.status == OK and s.arch == "sm_90" and len(s.kernels) == 2
    assert s.missing_metrics == ["l1tex__t_sector_hit_rate.pct", "sm__not_a_metric.sum"]
    empty = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv="==PROF== nothing\n"), parse_raw_csv)
    assert empty.status == NO_KERNELS and NVTX_INCLUDE in empty.reason
    broken = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv='"x","y"\n"1","2"\n'), parse_raw_csv)
    assert broken.status == FAILED and "parse" in broken.reason


def test_summary_json_round_trip_leaves_raw_bytes_out():
    s = finish_summary(ProfileSummary(backend="ncu", status=OK, raw_csv=TRITON_CSV.read_text(), report=b"\x00rep",
                                      workload_uuid="u1"), parse_raw_csv)
    data = json.loads(json.dumps(s.to_json()))
    assert "report" not in data and "raw_csv" not in data
    back = ProfileSummary.from_json(data)
    assert back.kernels[0].metrics == s.kernels[0].metrics and back.arch == "sm_90" and back.report is None
    assert KernelProfile.from_json(s.kernels[0].to_json()) == s.kernels[0]


# ---------------------------------------------------------------------------------------------
# What went wrong


@pytest.mark.parametrize("rc, text, status, words", [
    (1, PERMISSION_TEXT, NO_PERMISSION, "ERR_NVGPUCTRPERM"),
    (127, "ncu: command not found", UNAVAILABLE, "not found"),
    (1, "/bin/sh: 1: ncu: not found", UNAVAILABLE, "not found"),
    (1, "==ERROR== Failed to initialize the profiler: LibraryNotLoaded", UNAVAILABLE, "LibraryNotLoaded"),
    (0, "==PROF== Connected\n==WARNING== No kernels were profiled.\n", NO_KERNELS, "NVTX"),
    (2, "==ERROR== The application returned an error code (2).", FAILED, "error code (2)"),
    (1, "", FAILED, "exit code 1"),
    (0, "==PROF== Report: /tmp/x.ncu-rep", OK, ""),
    (1, "==ERROR== Failed to find metric sm__nope.sum", FAILED, "exit code 1"),
])
def test_diagnose(rc, text, status, words):
    got, reason = diagnose(rc, text)
    assert got == status and words in reason


def test_failed_metric_names_match_plain_and_regex_forms():
    requested = ["l1tex__t_sector_hit_rate.pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                 "sm__inst_executed_pipe_tensor_op_gmma.sum"]
    text = ("==ERROR== Failed to find metric regex:^l1tex__t_sector_hit_rate\\.(pct|ratio)$\n"
            "==ERROR== Failed to find metric sm__inst_executed_pipe_tensor_op_gmma.sum\n")
    assert failed_metric_names(text, requested) == ["l1tex__t_sector_hit_rate.pct",
                                                    "sm__inst_executed_pipe_tensor_op_gmma.sum"]
    assert failed_metric_names("all fine", requested) == []


def test_parse_ncu_version():
    text = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
            "Version 2025.3.1.0 (build 36398880) (public-release)\n")
    assert parse_ncu_version(text) == (2025, 3, 1, 0)
    assert parse_ncu_version("garbage") is None


# ---------------------------------------------------------------------------------------------
# Backend selection (pure)

OLD_NCU, NEW_NCU = (2025, 3, 1, 0), (2026, 2, 1, 0)


@pytest.mark.parametrize("preference, ncu, nsight, chosen, words", [
    ("auto", OLD_NCU, None, "ncu", "not installed"),
    ("auto", NEW_NCU, (1, 1, 0), "nsight", "nsight-python 1.1.0"),
    ("auto", OLD_NCU, (1, 1, 0), "ncu", "2026.2.1"),
    ("auto", NEW_NCU, (0, 9, 1), "ncu", "older than 1.0"),
    ("auto", None, (1, 1, 0), None, "ncu not found"),
    ("auto", None, None, None, "ncu not found"),
    ("nsight", OLD_NCU, (1, 0, 0), None, "needs ncu >= 2026.2.1"),
    ("nsight", NEW_NCU, (1, 0, 0), "nsight", "nsight-python 1.0.0"),
    ("nsight", NEW_NCU, None, None, "not installed"),
    ("ncu", NEW_NCU, (1, 1, 0), "ncu", "ncu 2026.2.1"),
    ("ncu", None, None, None, "ncu not found"),
])
def test_choose_backend(preference, ncu, nsight, chosen, words):
    name, why = choose_backend(preference, ncu, nsight)
    assert name == chosen and words in why


def test_choose_backend_rejects_unknown_names():
    with pytest.raises(ValueError, match="auto, ncu or nsight"):
        choose_backend("perf", OLD_NCU, None)
