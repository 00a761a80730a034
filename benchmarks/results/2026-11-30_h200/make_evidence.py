# Rebuilds evidence_gqa_decode.md from this folder's H200 data: latencies, floors and FlashInfer figures of
# run 1's `harness submit` of the example, digests of the ncu recordings in tests/fixtures/ncu (same GPU).
# Run from the repository root: python benchmarks/results/2026-11-30_h200/make_evidence.py
import json
from pathlib import Path
from harness.dataset import Dataset
from harness.profiling import OK, ProfileSummary, finish_summary, parse_ncu_csv
from controller.evidence import build_evidence
from controller.evidence.profiles import measured_stats

ds = Dataset(Path("definitions"))
d = ds.definition("gqa_paged_decode_h32_kv8_d128_ps1")
sub = json.load(open("benchmarks/results/2026-11-30_h200/submit_example_before_replay_fix.json"))
evals = [{**w, "workload_uuid": w["workload"]} for w in sub["workloads"]]
m = measured_stats(ds, d, {"evaluations": evals})
summaries = []
for label, uuid in (("b1_kv8192", "020253b8-8850-5672-98d0-1200bdec213b"),
                    ("b256_kv2048", "a66c5b83-ed1f-5418-919c-756a9a5c8ce3")):
    s = ProfileSummary(backend="ncu", status=OK, workload_uuid=uuid,
                       raw_csv=Path(f"tests/fixtures/ncu/h200_triton_example_{label}.csv").read_text())
    summaries.append(finish_summary(s, parse_ncu_csv))
ev = build_evidence(d.name, sub["solution"], m.stats, summaries, hardware="NVIDIA H200",
                    roofline_bytes=m.roofline_bytes)
print(ev.to_markdown())
