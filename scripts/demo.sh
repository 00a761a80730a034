#!/usr/bin/env bash
# Set up (if needed), then submit the example Triton solution and show what was archived.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
harness submit examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json "$@"
harness list --limit 5
