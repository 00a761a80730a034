#!/usr/bin/env bash
# Prepare wheels for a GPU host with no network (run on a connected machine).
#   scripts/make_wheelhouse.sh [DIR] [PYTHON_VERSION]        default: wheelhouse/ and 3.12
# On the GPU host (which already has torch, triton, numpy, click, rich, pyyaml, cuda-bindings):
#   python3 -m pip install --no-index --no-deps --target /tmp/site DIR/*.whl
#   export PYTHONPATH=/tmp/site:$PWD CUDA_HOME=/usr/local/cuda FLASHINFER_CUDA_ARCH_LIST=9.0
set -euo pipefail
DIR=${1:-wheelhouse}; PY=${2:-3.12}
mkdir -p "$DIR"
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
# What Crucible itself needs beyond a CUDA PyTorch image, and the GPU extra. Versions that are known to
# work together on an H200 with CUDA 13 / torch 2.11 (flashinfer 0.7.x wheels are 34-101 MB and pull far more).
PACKAGES=(
  "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types" "typing-inspection" "typing-extensions>=4.16"
  "sqlite-utils>=4" "sqlite-fts4" "click-default-group" "tabulate" "python-dateutil"
  "flashinfer-python==0.6.18.post1" "apache-tvm-ffi==0.1.15.post2" "cupti-python==13.0.1"
  "flashinfer-bench==0.1.2" "docstring-parser" "nvidia-ml-py"  # NVML: GPU state without a nvidia-smi process per reading
  "pytest-timeout"  # gpu_check.sh gives each GPU test its own limit (GPUTEST_EACH_S)
)
python3 -m pip download --no-deps --only-binary=:all: --python-version "$PY" --implementation cp "${PLATFORMS[@]}" \
  -d "$DIR" "${PACKAGES[@]}"
du -sh "$DIR"
echo "copy $DIR to the GPU host (keep it under the host's transfer budget), then see the header of this script"
