#!/usr/bin/env bash
# Everything that needs a GPU, in one pass: GPU tests, example submissions with baselines and roofline,
# timer parity, evaluation throughput, and (with two or more GPUs) evaluations spread over the GPUs.
# Usage: benchmarks/gpu_check.sh OUT_DIR [WHEELHOUSE]   (WHEELHOUSE: wheels for an air-gapped host)
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
LOG="$OUT/run.log"
section() { echo; echo "===== $* ====="; } 
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$LOG" 2>&1

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
python3 -m harness.cli list --archive "$ARCHIVE" >> "$LOG" 2>&1
exit 0
