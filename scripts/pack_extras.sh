#!/usr/bin/env bash
# Packages too large for one copy to an air-gapped GPU host (64 MiB a copy): Ray (79 MB wheel) and NVIDIA's
# CuTe-DSL (nvidia-cutlass-dsl, FlashInfer's GDN kernels; 92 MB libs wheel), repacked smaller and split into
# parts that fit beside the wheelhouse. Run on a connected machine:
#   scripts/pack_extras.sh [DIR] [PART_MB]        default: .xtra/ and 22 (three parts: one fits beside the 25 MB wheelhouse, two in the next copy)
# DIR/ray/: Ray without its Java jars, dashboard web build and the libraries Crucible does not use (rllib, tune,
# train, serve, data, llm), xz-packed (~28 MB), plus the wheels of its dependencies a CUDA PyTorch image lacks.
# DIR/cutlass/part-*: nvidia-cutlass-dsl 4.8.1 with its core, base and cu13 libs, xz-packed and split into PART_MB parts.
# On the host, scripts/unpack_extras.sh puts them together (parts may come in separate copies to one machine).
set -euo pipefail
DIR=${1:-.xtra}; PART_MB=${2:-22}; PY=3.12
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DIR/ray/wheels" "$DIR/cutlass"
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version $PY --implementation cp "${PLAT[@]}" -d "$@"; }

dl "$WORK" "ray==2.60.0"
dl "$DIR/ray/wheels" jsonschema jsonschema-specifications referencing rpds-py
mkdir -p "$WORK/ray" && unzip -q "$WORK"/ray-*.whl -d "$WORK/ray"
rm -rf "$WORK"/ray/ray/{jars,rllib,tune,train,serve,data,llm} "$WORK/ray/ray/dashboard/client/build"
tar cf - -C "$WORK/ray" . | xz -T0 -6 > "$DIR/ray/ray_site.tar.xz"

# libs-core holds the `cutlass` package itself: without it `import cutlass` finds a bare namespace package and
# FlashInfer's GDN kernels fail to import (found on the H200: `_PRETRANSPOSE_AVAILABLE` False).
dl "$WORK" "nvidia-cutlass-dsl==4.8.1" "nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-core==4.8.1" \
  "nvidia-cutlass-dsl-libs-cu13==4.8.1"
mkdir -p "$WORK/cutlass"
for w in "$WORK"/nvidia_cutlass_dsl*.whl; do unzip -q -o "$w" -d "$WORK/cutlass"; done
rm -f "$DIR"/cutlass/part-*
tar cf - -C "$WORK/cutlass" . | xz -T0 -6 | split -b "${PART_MB}m" -d - "$DIR/cutlass/part-"
du -sh "$DIR"/ray "$DIR"/cutlass/part-*
echo "carry $DIR/ray (with the wheelhouse) in one copy; the cutlass parts may need one copy each (scripts/unpack_extras.sh)"
