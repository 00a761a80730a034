"""Evidence test support: the ncu fixtures folder and a finished profile summary read from one of its reports."""

from __future__ import annotations

from harness.profiling import OK, ProfileSummary, finish_summary, parse_ncu_csv

from support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"


def summary_of(name: str, uuid: str = "w") -> ProfileSummary:
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=(FIXTURES / name).read_text(), workload_uuid=uuid)
    return finish_summary(s, parse_ncu_csv)
