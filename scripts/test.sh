#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. GPU tests run only where a GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate
python scripts/pack_examples.py --check
python -m pytest -q --durations=30 "$@"
