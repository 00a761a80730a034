#!/usr/bin/env bash
# Everything that needs a GPU, in one pass: GPU tests, example submissions with baselines and roofline,
# timer parity, evaluation throughput, and (with two or more GPUs) evaluations spread over the GPUs.
# Usage: benchmarks/gpu_check.sh OUT_DIR [WHEELHOUSE]   (WHEELHOUSE: wheels for an air-gapped host)
# STAGES (default "core"): core = GPU tests, example submission, illegal address, parity, throughput,
# multi-GPU; extra stages, each a few minutes: adversarial audit_cost profile controller report.
#   STAGES="adversarial audit_cost" benchmarks/gpu_check.sh OUT .whl
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
NGPU=$(nvidia-smi -L | wc -l)
STAGES=" ${STAGES:-core} "
has() { case "$STAGES" in *" $1 "*) return 0;; esac; return 1; }
LOG="$OUT/run.log"
section() { echo; echo "===== $* ====="; } 
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$LOG" 2>&1

if has core; then
if [ "$NGPU" -ge 2 ]; then
  (CUDA_VISIBLE_DEVICES=1 timeout 520 python3 benchmarks/eval_throughput.py --out "$OUT" > "$OUT/throughput.log" 2>&1; cat "$OUT/throughput.log" >> "$LOG"; rm -f "$OUT/throughput.log") &
  THROUGHPUT=$!
  export CUDA_VISIBLE_DEVICES=0
fi
timeout 200 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -k "not spread" 2>&1 | tee -a "$LOG"
timeout 200 python3 -m harness.cli submit examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json --archive "$ARCHIVE" \
  2>&1 | tee -a "$LOG"
timeout 60 python3 -m harness.cli submit examples/illegal_address/solution.json -w uniform_b1_kv512 -w uniform_b16_kv512 --archive "$ARCHIVE" \
  --no-baselines 2>&1 | tee -a "$LOG"
timeout 150 python3 benchmarks/timing_parity.py ${PARITY_ARGS:-} --out "$OUT" 2>&1 | tee -a "$LOG"
if [ "$NGPU" -ge 2 ]; then
  wait $THROUGHPUT
  unset CUDA_VISIBLE_DEVICES
  timeout 120 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -k "spread" 2>&1 | tee -a "$LOG"
  timeout 120 python3 -m harness.cli submit examples/triton_gqa_decode/solutions/ -w uniform_b64_kv2048 -w skewed_b64 --archive "$ARCHIVE" \
    2>&1 | tee -a "$LOG"
else
  timeout 520 python3 benchmarks/eval_throughput.py --out "$OUT" > "$OUT/throughput.log" 2>&1; cat "$OUT/throughput.log" >> "$LOG"; rm -f "$OUT/throughput.log"
fi
fi  # core

if has adversarial; then  # the attack suite where CUPTI, streams and timing replay are real
  timeout 500 python3 -m pytest -q tests/adversarial tests/test_gpu_harness.py -p no:cacheprovider 2>&1 | tee -a "$LOG"
fi
if has audit_cost; then
  timeout 500 python3 benchmarks/audit_cost.py --out "$OUT" 2>&1 | tee -a "$LOG"
fi
if has profile; then  # real ncu recordings for tests/fixtures/ncu (see its README)
  METRICS=$(python3 -c 'from controller.evidence import requested_metrics; print(",".join(requested_metrics("sm_90")))')
  for sol in examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json \
             definitions/solutions/baseline/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1/*.json; do
    timeout 200 python3 -m harness.cli profile "$sol" -w uniform_b1_kv8192 -w uniform_b256_kv2048 \
      --archive "$ARCHIVE" --json 2>&1 | tee -a "$LOG"
  done
fi
if has controller; then
  timeout 560 python3 -m controller.cli loop --definition gqa_paged_decode_h32_kv8_d128_ps1 --provider offline \
    --rounds 4 --candidates 3 --archive "$ARCHIVE" --json > "$OUT/controller_run.json" 2>> "$LOG"
fi
if has report; then
  python3 -m harness.cli report --archive "$ARCHIVE" --out /tmp/report >> "$LOG" 2>&1 \
    && tar czf "$OUT/report.tgz" -C /tmp report
fi
python3 -m harness.cli list --archive "$ARCHIVE" >> "$LOG" 2>&1
exit 0
