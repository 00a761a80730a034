#!/usr/bin/env bash
# Set up a CPU development environment in .venv (idempotent). GPU hosts: see README "On a GPU host".
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip_q() { python -m pip install -q --disable-pip-version-check "$@"; }
# The CPU torch wheel: a bare `torch` requirement would pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || pip_q "torch==2.13.0"
# Triton for the CPU interpreter; triton 3.6 breaks with numpy >= 2.4 (range over tl.cdiv).
python -c "import triton" 2>/dev/null || pip_q "triton==3.6.0" "numpy<2.4"
pip_q -e ".[dev]"
if [ "${1:-}" = "--test" ]; then
  # What the report, browse and browser tests use. Without them those tests skip and say why.
  # (anthropic/openai for the provider contract tests, which mock their HTTP transport: no network)
  python -c "import matplotlib, datasette, anthropic, openai" 2>/dev/null || pip_q -e ".[dev,llm,report,browse]"
  # Ray for the Ray executor's tests (a two-node cluster on this machine); without it they skip and say why.
  python -c "import ray" 2>/dev/null || pip_q -e ".[ray]"
  # The linter CI runs after the tests (.ci/run).
  .venv/bin/ruff --version 2>/dev/null | grep -qx "ruff 0.17.6" || pip_q -e ".[lint]"
  if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core) \
      >/dev/null 2>&1 || echo "chromium could not be installed: the browser test will skip"
  fi
fi
# The official data models, to prove exports load with them (their GPU dependencies are not needed).
python -c "import flashinfer_bench" 2>/dev/null || pip_q --no-deps "flashinfer-bench==0.1.2" "docstring-parser>=0.16"
