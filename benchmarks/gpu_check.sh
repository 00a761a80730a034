#!/usr/bin/env bash
# Everything that needs a GPU, in one pass: GPU tests, example submissions with baselines and roofline,
# timer parity, evaluation throughput, and (with two or more GPUs) evaluations spread over the GPUs.
# Usage: benchmarks/gpu_check.sh OUT_DIR [WHEELHOUSE]   (WHEELHOUSE: wheels for an air-gapped host)
# STAGES (default "core"): core = gputests examples parity throughput (plus the multi-GPU spread with two
# GPUs); each can also be named alone. Extra stages, each a few minutes: adversarial audit_cost profile
# fixtures proof controller report judge_set judge_families judge_scale slow_timing families moe_prebuild family_records
# sweep loop_record promoted probe.
#   STAGES="adversarial audit_cost" benchmarks/gpu_check.sh OUT .whl
# Knobs: GPUTESTS_K (pytest -k of the GPU tests), EXAMPLE_WORKLOADS (comma-separated), ROUNDS, CANDIDATES,
# CONTROLLER_DEFINITION (names or aliases, comma-separated; gqa_decode: its four definitions, one GPU each on a
# multi-GPU host), CONTROLLER_ARGS,
# CONTROLLER_RESUME=1 (continue every run of ARCHIVE a timeout cut short), ADV_K (pytest -k of the adversarial suite),
# BUDGET_S and DONE_DIR (a time budget, and continuing on the same host: see `stage` below),
# JUDGE_ARGS, JUDGE_TIMEOUT (judge_set: e.g. JUDGE_ARGS="--corpus DIR --budget-s 330 --timeout 150", a folder of other
# people's solutions on each definition's largest workload), AUDIT_ARGS, PARITY_ARGS, THROUGHPUT_ARGS (e.g. --workloads a,b), ARCHIVE (default /tmp/crucible-archive), KEEP_ARCHIVE=1 (archive.tgz back in OUT: a travel copy), GPUTESTS_TIMEOUT/ADV_TIMEOUT/AUDIT_TIMEOUT/CONTROLLER_TIMEOUT (s).
# CARRIED=FILE.tgz: an earlier host's travel copy (KEEP_ARCHIVE=1 KEEP_JIT=1 there) unpacked into ARCHIVE first, so
# FlashInfer's modules and the baselines are not built and timed again. KEEP_JIT=1: the travel copy keeps FlashInfer's
# JIT modules (.so only). sweep: SWEEP_CONFIGS (JSON lists, comma-separated, benchmarks/template_sweep.py), SWEEP_DEFINITIONS,
# SWEEP_ARGS (more `harness submit` arguments, e.g. "-w uniform_b1_kv8192"). promoted: examples/gqa_decode_promoted/ of
# PROMOTED_DEFINITIONS (default all four) submitted on every workload (PROMOTED_TIMEOUT, PROMOTED_ARGS), summarised by
# benchmarks/submit_summary.py; PROMOTED_PROFILE=1: then each one's ncu digest per regime (OUT/ncu_promoted_<def>.json;
# PROMOTED_PROFILE_ARGS, e.g. "-w uniform_b1_kv8192,skewed_b64": those workloads instead of one per regime).
# probe: benchmarks/stream_probe.py on PROBE_DEFINITIONS (comma-separated; PROBE_ARGS, e.g. "--workloads
# uniform_b1_kv8192,skewed_b64 --stages 2", PROBE_TIMEOUT) into OUT/probe/, then each submission of this call's
# promoted stage beside those reads (OUT/probe/decode_vs_read_promoted_<def>.md).
# loop_record: for each of LOOP_DEFINITIONS
# (comma-separated) `controller loop --provider offline` from the naive kernel within LOOP_BUDGET_S (default 380),
# then benchmarks/loop_record.py (ncu digest unless LOOP_PROFILE=0) into OUT/loop_<definition>/. LOOP_EXTEND_S=S:
# instead of a new run, the definition's newest run in ARCHIVE (a CARRIED travel copy) continues, given S seconds of
# wall in all (its total from its start: `controller loop --resume RUN --budget-wall-s S`, controller/extend.py);
# CONTROLLER_TIMEOUT then defaults to the run's remaining budget + 120 s (a lower one is warned of in run.log).
# With two GPUs the throughput benchmark runs on the second GPU while the rest runs on the first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?output folder}; WHL=${2:-}
mkdir -p "$OUT"
if [ -n "$WHL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 COLUMNS=200
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fiws} MAX_JOBS=${MAX_JOBS:-16}
ARCHIVE=${ARCHIVE:-/tmp/crucible-archive}; mkdir -p "$ARCHIVE"
if [ -n "${CARRIED:-}" ] && [ -z "$(ls -A "$ARCHIVE")" ]; then tar xzf "$CARRIED" -C "$ARCHIVE" || exit 1; fi
NGPU=$(nvidia-smi -L | wc -l)
STAGES=" ${STAGES:-core} "
case "$STAGES" in *" core "*) STAGES="$STAGES gputests examples parity throughput ";; esac
has() { case "$STAGES" in *" $1 "*) return 0;; esac; return 1; }
# BUDGET_S: the seconds this call may use (a device lease, a CI slot). A stage whose estimate (EST_<stage> to
# override) does not fit in what is left is deferred, not started; later stages that fit still run. DONE_DIR: a
# marker per finished stage, so the same command on the same host continues with what is left (a stage cut by
# the caller's limit has no marker and runs again). Both off by default.
T0=$(date +%s); DONE_DIR=${DONE_DIR:-}; [ -n "$DONE_DIR" ] && mkdir -p "$DONE_DIR"
declare -A EST=([gputests]=560 [examples]=150 [parity]=150 [throughput]=300 [adversarial]=220 [judge_set]=360
  [judge_families]=560 [judge_scale]=560 [slow_timing]=280 [families]=600 [family_records]=560 [audit_cost]=300
  [fixtures]=300 [profile]=300 [proof]=200 [controller]=560 [report]=60 [moe_prebuild]=10 [sweep]=300 [promoted]=600
  [loop_record]=480 [probe]=300)
CURRENT=
mark_done() { [ -n "$CURRENT" ] && [ -n "$DONE_DIR" ] && touch "$DONE_DIR/$CURRENT"; CURRENT=; }
stage() {  # stage NAME: is it asked for, not done yet, and does it fit? (the previous stage has finished)
  mark_done; has "$1" || return 1
  if [ -n "$DONE_DIR" ] && [ -f "$DONE_DIR/$1" ]; then echo "(stage $1: done in an earlier call)" >> "$LOG"; return 1; fi
  if [ -n "${BUDGET_S:-}" ]; then
    local var="EST_$1" left=$(( BUDGET_S - ($(date +%s) - T0) ))
    local est=${!var:-${EST[$1]:-300}}
    if [ "$est" -gt "$left" ]; then echo "DEFERRED $1 (estimate $est s, $left s left)" | tee -a "$OUT/deferred.txt" >> "$LOG"; return 1; fi
  fi
  CURRENT=$1; return 0; }
LOG="$OUT/run.log"
section() { { echo; echo "===== $* ===== $(date -u +%T)"; } >> "$LOG"; }
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$LOG" 2>&1

THROUGHPUT=
if has throughput && [ "$NGPU" -ge 2 ]; then  # on the second GPU, beside the rest
  (CUDA_VISIBLE_DEVICES=1 timeout 520 python3 benchmarks/eval_throughput.py --out "$OUT" ${THROUGHPUT_ARGS:-} > "$OUT/throughput.log" 2>&1; cat "$OUT/throughput.log" >> "$LOG"; rm -f "$OUT/throughput.log") &
  THROUGHPUT=$!
  export CUDA_VISIBLE_DEVICES=0
fi
if stage moe_prebuild; then  # FlashInfer's CUTLASS fused-MoE module (the MoE stand-in baseline): minutes of nvcc
  # PREBUILD_BACKGROUND=1: beside the stages that follow (PREBUILD_JOBS compile jobs, default 8, leave the GPU work
  # its cores); family_records of MoE waits for it. The cache is CRUCIBLE_FLASHINFER_CACHE (set here if unset).
  export CRUCIBLE_FLASHINFER_CACHE=${CRUCIBLE_FLASHINFER_CACHE:-/tmp/crucible-flashinfer}
  section "MoE prebuild"
  prebuild() {  # done (DONE_DIR) only once the module is built: a build cut short continues in the next call
    if python3 scripts/prebuild_flashinfer_moe.py --jobs ${PREBUILD_JOBS:-8} --budget-s ${PREBUILD_BUDGET_S:-540} \
        > "$OUT/moe_prebuild.log" 2>&1; then [ -n "$DONE_DIR" ] && touch "$DONE_DIR/moe_prebuild"; fi
    cat "$OUT/moe_prebuild.log" >> "$LOG"; }
  CURRENT=  # marked by prebuild itself
  if [ -n "${PREBUILD_BACKGROUND:-}" ]; then prebuild & PREBUILD=$!; else prebuild; fi
fi
if stage gputests; then
  section "GPU tests"
  # -v and the whole output kept: a run cut short by its timeout still says which tests passed and how long each took
  # one slow test must not hide the others: each has GPUTEST_EACH_S (where pytest-timeout is installed)
  EACH=(); python3 -c "import pytest_timeout" 2>/dev/null && EACH=(--timeout "${GPUTEST_EACH_S:-150}")
  timeout ${GPUTESTS_TIMEOUT:-540} python3 -m pytest -v -rA --durations=0 -m gpu tests/ -p no:cacheprovider \
    "${EACH[@]}" -k "${GPUTESTS_K:-not spread}" > "$OUT/gputests.log" 2>&1
  grep -E "(PASSED|FAILED|ERROR|SKIPPED)|passed|failed|^E |s call " "$OUT/gputests.log" | tee -a "$LOG"
fi
if stage examples; then
  section "example submission"
  timeout 200 python3 -m harness submit examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json --archive "$ARCHIVE" \
    ${EXAMPLE_WORKLOADS:+-w "$EXAMPLE_WORKLOADS"} --json > "$OUT/submit_example.json" 2>> "$LOG"
  SID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["submission_id"])' "$OUT/submit_example.json" 2>> "$LOG")
  [ -n "$SID" ] && python3 -m harness show "$SID" --archive "$ARCHIVE" >> "$LOG" 2>&1
  section "illegal address"
  timeout 60 python3 -m harness submit examples/illegal_address/solution.json -w uniform_b1_kv512 -w uniform_b16_kv512 --archive "$ARCHIVE" \
    --no-baselines 2>&1 | tee -a "$LOG"
fi
if stage parity; then
  section "timer parity"
  timeout 150 python3 benchmarks/timing_parity.py ${PARITY_ARGS:-} --out "$OUT" 2>&1 | tee -a "$LOG"
fi
if stage throughput; then
  if [ -n "$THROUGHPUT" ]; then
    wait $THROUGHPUT
  else
    section "evaluation throughput"
    timeout 520 python3 benchmarks/eval_throughput.py --out "$OUT" ${THROUGHPUT_ARGS:-} > "$OUT/throughput.log" 2>&1; cat "$OUT/throughput.log" >> "$LOG"; rm -f "$OUT/throughput.log"
  fi
fi
unset CUDA_VISIBLE_DEVICES
if has core && [ "$NGPU" -ge 2 ]; then
  section "multi-GPU spread"
  timeout 120 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -k "spread" 2>&1 | tee -a "$LOG"
  timeout 120 python3 -m harness submit examples/triton_gqa_decode/solutions/ -w uniform_b64_kv2048 -w skewed_b64 --archive "$ARCHIVE" \
    2>&1 | tee -a "$LOG"
fi

if stage adversarial; then  # the attack suite where CUPTI, streams and timing replay are real
  section "adversarial suite"
  timeout ${ADV_TIMEOUT:-500} python3 -m pytest -q -rA tests/adversarial -p no:cacheprovider -k "${ADV_K:-not nothing}" 2>&1 | tail -60 | tee -a "$LOG"
fi
if stage judge_set; then  # honest solutions promotable, dishonest ones not (attribution, not only the gate)
  section "judge set"
  timeout ${JUDGE_TIMEOUT:-560} python3 benchmarks/judge_set.py --out "$OUT" --archive "$ARCHIVE" ${JUDGE_ARGS:-} 2>&1 | tee -a "$LOG"
fi
if stage judge_families; then  # the same for the contest's other definitions (MoE, DSA, GDN)
  section "judge set: families"
  timeout ${JUDGE_TIMEOUT:-560} python3 benchmarks/judge_set.py --set families --out "$OUT/families" \
    --archive "$ARCHIVE" ${JUDGE_ARGS:-} 2>&1 | tee -a "$LOG"
fi
if stage judge_scale; then  # GPU memory per process on every workload, cold and warm wall (JUDGE_SCALE_ARGS)
  section "judge scale"
  timeout ${JUDGE_SCALE_TIMEOUT:-560} python3 benchmarks/judge_scale.py --out "$OUT" ${JUDGE_SCALE_ARGS:-} 2>&1 | tee -a "$LOG"
fi
if stage slow_timing; then  # where a many-kernel PyTorch solution spends its time on skewed_b64: the workers' stacks
  section "slow timing"
  python3 - <<'PY'
import json
src = open("benchmarks/solutions/judge/torch_sdpa_fallback.py").read()
sol = {"name": "torch_beside_token_kernel", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "diagnosis",
       "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run", "dependencies": [],
                "destination_passing_style": True}, "sources": [{"path": "kernel.py", "content": src}]}
json.dump(sol, open("/tmp/slow_timing.json", "w"))
PY
  CRUCIBLE_DUMP_STACKS_AFTER_S=${STACKS_AFTER_S:-30} timeout ${SLOW_TIMEOUT:-280} python3 -m harness submit /tmp/slow_timing.json \
    -w skewed_b64 --no-baselines --timeout 240 --archive "$ARCHIVE" --json > "$OUT/slow_timing.json" 2> "$OUT/slow_timing.stderr"
  SID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["submission_id"])' "$OUT/slow_timing.json" 2>> "$LOG")
  [ -n "$SID" ] && python3 -m harness show "$SID" --archive "$ARCHIVE" --log skewed_b64 > "$OUT/slow_timing_log.txt" 2>&1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["status"], d.get("phases_s")); [print(w["label"], w["status"], w["message"][:300]) for w in d["workloads"]]' "$OUT/slow_timing.json" >> "$LOG" 2>&1
fi
if stage families; then  # the contest's other definitions: each example on every workload (FAMILY_ARGS: more submit args)
  section "families"
  # GDN's FlashInfer baselines are CuTe-DSL kernels: say whether this host can run them at all
  python3 -c "import cutlass, flashinfer.gdn_decode as d; print('cutlass-dsl', getattr(cutlass, '__version__', '?'), 'pretranspose', d._PRETRANSPOSE_AVAILABLE)" >> "$LOG" 2>&1 \
    || echo "nvidia-cutlass-dsl not importable: the GDN baselines will fail (archived with the reason)" >> "$LOG"
  for sol in examples/moe_fp8/solutions/*.json examples/dsa_sparse/solutions/*.json examples/gdn/solutions/*.json; do
    name=$(basename "$sol" .json)
    timeout ${FAMILY_TIMEOUT:-280} python3 -m harness submit "$sol" --archive "$ARCHIVE" --json ${FAMILY_ARGS:-} \
      > "$OUT/family_$name.json" 2>> "$LOG"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], d["status"], d.get("scores"), d.get("phases_s")); [print(" ", w["label"], w["status"], w.get("latency_ms"), w.get("fraction_of_floor"), (w.get("memory") or {}).get("together_bytes"), w["message"][:200]) for w in d["workloads"]]' "$OUT/family_$name.json" >> "$LOG" 2>&1
  done
fi
if stage family_records; then  # every workload of the contest families, resumable: carry ARCHIVE to continue
  case " ${FAMILY_RECORDS_ARGS:-} " in  # the MoE baseline needs its module; other definitions need not wait
    *--definitions*moe*|*--definitions=*moe*) [ -n "${PREBUILD:-}" ] && wait "$PREBUILD";;
    *--definitions*) ;;
    *) [ -n "${PREBUILD:-}" ] && wait "$PREBUILD";;
  esac
  section "family records"
  FR_T=${FAMILY_RECORDS_TIMEOUT:-560}  # resumable, so under BUDGET_S it takes what is left (the next call continues)
  if [ -n "${BUDGET_S:-}" ]; then LEFT=$(( BUDGET_S - ($(date +%s) - T0) - 10 )); [ "$LEFT" -lt "$FR_T" ] && FR_T=$LEFT; fi
  timeout $FR_T python3 benchmarks/family_records.py --out "$OUT" --archive "$ARCHIVE" \
    --budget-s $(( FR_T - 20 )) ${FAMILY_RECORDS_ARGS:-} 2>&1 | tee -a "$LOG"
fi
if stage audit_cost; then
  section "audit cost"
  timeout ${AUDIT_TIMEOUT:-500} python3 benchmarks/audit_cost.py --out "$OUT" ${AUDIT_ARGS:-} 2>&1 | tee -a "$LOG"
fi
if stage fixtures; then  # real ncu recordings for tests/fixtures/ncu (its README has the same commands)
  section "ncu fixtures"
  NCU=$(python3 -c 'from harness.profiling import find_ncu; print(find_ncu() or "")')
  METRICS=$(python3 -c 'from controller.evidence import requested_metrics; print(",".join(requested_metrics("sm_90")))')
  DEF=gqa_paged_decode_h32_kv8_d128_ps1; SOLS=definitions/solutions/baseline/gqa_paged/$DEF
  B1=020253b8-8850-5672-98d0-1200bdec213b; B256=a66c5b83-ed1f-5418-919c-756a9a5c8ce3
  FIX=/tmp/ncu_fixtures; mkdir -p $FIX
  record() {
    timeout 200 "$NCU" --clock-control none --cache-control all --target-processes all \
      --nvtx --nvtx-include crucible_candidate/ --metrics "$METRICS" \
      --log-file "$FIX/$1.log" --force-overwrite --export "$FIX/$1" \
      python3 -m harness.profiling.target --solution "$2" --workload "$3" --seed 0 --dataset definitions \
      --status-file "$FIX/$1.status.json" >> "$LOG" 2>&1
    "$NCU" --import "$FIX/$1.ncu-rep" --csv --page raw --print-units base > "$FIX/$1.csv" 2>> "$LOG"
    "$NCU" --import "$FIX/$1.ncu-rep" --page details --print-units base > "$FIX/$1.details.txt" 2>> "$LOG"
    echo "recorded $1: $(wc -l < "$FIX/$1.csv") csv lines" >> "$LOG"
  }
  record h200_flashinfer_tensor_cores_b1_kv8192   $SOLS/flashinfer_decode_tensor_cores.json $B1
  record h200_flashinfer_tensor_cores_b256_kv2048 $SOLS/flashinfer_decode_tensor_cores.json $B256
  record h200_flashinfer_cuda_cores_b1_kv8192     $SOLS/flashinfer_decode_cuda_cores.json   $B1
  record h200_flashinfer_cuda_cores_b256_kv2048   $SOLS/flashinfer_decode_cuda_cores.json   $B256
  record h200_triton_example_b1_kv8192            examples/triton_gqa_decode/solutions/$DEF.json $B1
  record h200_triton_example_b256_kv2048          examples/triton_gqa_decode/solutions/$DEF.json $B256
  grep -hE '==(ERROR|WARNING)==' $FIX/*.log >> "$LOG"; cat $FIX/*.status.json >> "$LOG"
  rm -f $FIX/*.ncu-rep; tar czf "$OUT/ncu_fixtures.tgz" -C /tmp ncu_fixtures
fi
if stage profile; then  # the same through `harness profile`: sandboxed, archived, digested
  section "harness profile"
  for sol in examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json \
             definitions/solutions/baseline/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1/*.json; do
    timeout 200 python3 -m controller profile "$sol" -w uniform_b1_kv8192 -w uniform_b256_kv2048 \
      --archive "$ARCHIVE" --json >> "$OUT/profile.jsonl" 2>> "$LOG"
  done
fi
if stage proof; then  # instruction proof on real SASS and ncu counters: an honest claim and a false one
  section "instruction proof"
  for claim in hmma wgmma; do
    python3 - "$claim" <<'PY'
import json, sys
src = "examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json"
d = json.load(open(src)); d["name"] = f"triton_gqa_decode_claims_{sys.argv[1]}"
d["spec"]["instruction_claims"] = [sys.argv[1]]
json.dump(d, open(f"/tmp/claims_{sys.argv[1]}.json", "w"))
PY
    timeout 240 python3 -m harness submit /tmp/claims_$claim.json -w uniform_b64_kv2048 --audit-level full --archive "$ARCHIVE" \
      --json > "/tmp/proof_$claim.json" 2>> "$LOG"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], "promotable", d["promotable"]); [print(" ", a["name"], a["passed"], a["detail"][:400]) for a in d.get("audits", []) + [a for w in d["workloads"] for a in w["audits"]]]' "/tmp/proof_$claim.json" >> "$LOG" 2>&1
  done
fi
if stage controller; then
  section "controller loop"
  if [ -n "${CONTROLLER_RESUME:-}" ]; then  # continue every run a timeout cut short, one GPU each
    timeout ${CONTROLLER_TIMEOUT:-560} python3 -m controller loop --resume unfinished --archive "$ARCHIVE" --json > "$OUT/controller_run.json" 2>> "$LOG"
  else
    timeout ${CONTROLLER_TIMEOUT:-560} python3 -m controller loop --definition ${CONTROLLER_DEFINITION:-gqa_paged_decode_h32_kv8_d128_ps1} --provider offline \
      --rounds ${ROUNDS:-4} --candidates ${CANDIDATES:-3} ${CONTROLLER_ARGS:-} --archive "$ARCHIVE" --json > "$OUT/controller_run.json" 2>> "$LOG"
  fi
  python3 -m controller trajectory --all --archive "$ARCHIVE" --out /tmp/trajectory >> "$LOG" 2>&1
  tar czf "$OUT/trajectory.tgz" -C /tmp trajectory
fi
if stage promoted; then  # the loop's promoted gqa_decode solutions (examples/) on every workload, through every audit
  section "promoted examples"
  defs=${PROMOTED_DEFINITIONS:-gqa_paged_decode_h32_kv8_d128_ps1,gqa_paged_decode_h32_kv8_d128_ps64,gqa_paged_decode_h32_kv4_d128_ps1,gqa_paged_decode_h32_kv4_d128_ps64}
  for def in ${defs//,/ }; do
    timeout ${PROMOTED_TIMEOUT:-240} python3 -m harness submit "examples/gqa_decode_promoted/solutions/$def.json" \
      --archive "$ARCHIVE" --json ${PROMOTED_ARGS:-} > "$OUT/promoted_$def.json" 2>> "$LOG"
    python3 benchmarks/submit_summary.py "$OUT/promoted_$def.json" >> "$LOG" 2>&1
    if [ "${PROMOTED_PROFILE:-0}" = 1 ]; then  # its ncu digest per regime (`controller profile`), in its sandbox
      sid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["submission_id"])' "$OUT/promoted_$def.json") \
        && timeout ${PROFILE_TIMEOUT:-240} python3 -m controller profile "$sid" --archive "$ARCHIVE" --json ${PROMOTED_PROFILE_ARGS:-} \
          > "$OUT/ncu_promoted_$def.json" 2>> "$LOG"
    fi
  done
fi
if stage sweep; then
  section "template sweep"
  timeout ${SWEEP_TIMEOUT:-560} python3 benchmarks/template_sweep.py --out "$OUT" --archive "$ARCHIVE" \
    --definitions "${SWEEP_DEFINITIONS:-gqa_paged_decode_h32_kv8_d128_ps1}" ${SWEEP_CONFIGS:+--configs "$SWEEP_CONFIGS"} \
    -- ${SWEEP_ARGS:-} >> "$LOG" 2>&1
fi
if stage probe; then  # benchmarks/stream_probe.py: the bare reads of each workload, then the submissions beside them
  section "stream probe"
  timeout ${PROBE_TIMEOUT:-560} python3 benchmarks/stream_probe.py --out "$OUT/probe" \
    --definitions "${PROBE_DEFINITIONS:-gqa_paged_decode_h32_kv4_d128_ps64}" ${PROBE_ARGS:-} > "$OUT/probe.log" 2>&1
  echo "stream probe rc $?" >> "$LOG"; grep "^|" "$OUT/probe.log" | head -40 >> "$LOG"
  for submitted in "$OUT"/promoted_*.json; do  # submissions of this call (the promoted stage), beside the reads
    [ -s "$submitted" ] && [ -s "$OUT/probe/stream_probe.json" ] && python3 benchmarks/stream_probe.py \
      --out "$OUT/probe" --compare "$submitted" "$OUT/probe/stream_probe.json" >> "$LOG" 2>&1 \
      && mv "$OUT/probe/decode_vs_read.md" "$OUT/probe/decode_vs_read_$(basename "$submitted" .json).md"
  done
fi
if stage loop_record; then
  defs=${LOOP_DEFINITIONS:-gqa_paged_decode_h32_kv8_d128_ps1}
  for def in ${defs//,/ }; do
    section "loop from the naive kernel: $def"
    mkdir -p "$OUT/loop_$def"
    started=$SECONDS
    if [ -n "${LOOP_EXTEND_S:-}" ]; then  # the newest run of the definition, given more wall time
      read -r run spent < <(python3 -m controller runs -d "$def" --archive "$ARCHIVE" --json | python3 -c \
        'import json, sys; r = json.load(sys.stdin)[0]; print(r["run_id"], int(r["wall_s"]))')
      # The budget counts round walls; the controller's start (imports, the archive, FlashInfer's modules) does not,
      # so the outer timeout gets the run's remaining budget plus a margin (run 17: 300 s for 286 s left cut it).
      left=$(( ${LOOP_EXTEND_S%.*} - spent )); ctl=${CONTROLLER_TIMEOUT:-$(( left + 120 ))}
      [ "$ctl" -lt $(( left + 60 )) ] && echo "warning: CONTROLLER_TIMEOUT ${ctl} s is under the run's ${left} s of" \
        "budget left + 60 s of start-up: the outer timeout may cut the run short (it stays resumable)" >> "$LOG"
      timeout "$ctl" python3 -m controller loop --resume "$run" --rounds ${ROUNDS:-6} \
        --budget-wall-s "$LOOP_EXTEND_S" --archive "$ARCHIVE" --json \
        > "$OUT/loop_$def/loop.json" 2> "$OUT/loop_$def/loop.log"
    else
      timeout ${CONTROLLER_TIMEOUT:-560} python3 -m controller loop \
        --definition "$def" --provider offline --rounds ${ROUNDS:-6} --candidates ${CANDIDATES:-3} \
        --budget-wall-s ${LOOP_BUDGET_S:-380} --no-profile --archive "$ARCHIVE" --json \
        > "$OUT/loop_$def/loop.json" 2> "$OUT/loop_$def/loop.log"
    fi
    echo "loop command wall $((SECONDS - started)) s" >> "$OUT/loop_$def/loop.log"
    tail -3 "$OUT/loop_$def/loop.log" >> "$LOG"
    profile=--profile; [ "${LOOP_PROFILE:-1}" = 0 ] && profile=
    timeout ${RECORD_TIMEOUT:-300} python3 benchmarks/loop_record.py --loop "$OUT/loop_$def/loop.json" \
      --archive "$ARCHIVE" --out "$OUT/loop_$def" $profile >> "$LOG" 2>&1
  done
fi
if stage report; then
  python3 -m harness report --archive "$ARCHIVE" --out /tmp/report >> "$LOG" 2>&1 \
    && tar czf "$OUT/report.tgz" -C /tmp report
fi
[ -n "${PREBUILD:-}" ] && wait "$PREBUILD"
mark_done
section "archive"
python3 -m harness list --archive "$ARCHIVE" >> "$LOG" 2>&1
# KEEP_ARCHIVE=1: a travel copy (no cached reference outputs; `harness copy-archive`) comes back to carry to the next host
if [ -n "${KEEP_ARCHIVE:-}" ]; then
  rm -rf /tmp/archive_travel && python3 -m harness copy-archive /tmp/archive_travel --archive "$ARCHIVE" \
    ${KEEP_JIT:+--with-jit} >> "$LOG" 2>&1 \
    && tar czf "$OUT/archive.tgz" -C /tmp/archive_travel .
fi
exit 0
