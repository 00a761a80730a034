#!/usr/bin/env bash
# One pass over everything that needs a GPU: GPU tests, the example submissions, timer parity.
# Usage: benchmarks/gpu_check.sh OUT_DIR [WHEELHOUSE]   (WHEELHOUSE: wheels for an air-gapped host)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?output folder}; WHL=${2:-}
mkdir -p "$OUT"
if [ -n "$WHL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fiws} MAX_JOBS=${MAX_JOBS:-16}
ARCHIVE=${ARCHIVE:-/tmp/crucible-archive}; mkdir -p "$ARCHIVE"
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/env.txt" 2>&1
python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
python3 -m harness.cli submit examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json \
  --archive "$ARCHIVE" 2>&1 | tee "$OUT/submit_example.log"
python3 -m harness.cli submit examples/illegal_address/solution.json -w uniform_b1_kv512 -w uniform_b16_kv512 \
  --archive "$ARCHIVE" 2>&1 | tee "$OUT/submit_illegal_address.log"
python3 -m harness.cli list --archive "$ARCHIVE" 2>&1 | tee "$OUT/list.log"
python3 -m harness.cli show 2 --archive "$ARCHIVE" 2>&1 | tee -a "$OUT/submit_illegal_address.log"
python3 benchmarks/timing_parity.py ${PARITY_ARGS:---quick} --out "$OUT" 2>&1 | tee "$OUT/parity.log"
exit 0
