#!/usr/bin/env bash
# On the GPU host: unpack what scripts/pack_extras.sh made. Source it so the exports stay:
#   . scripts/unpack_extras.sh [DIR] [STASH]        default: .xtra and /tmp/crucible-extras
# Cutlass parts that came in earlier copies to the same machine are kept in STASH (a warm machine keeps /tmp);
# once every part is there (the joined stream passes `xz -t`), they are unpacked and put on PYTHONPATH with the
# CuTe-DSL package folder (its .pth file is not read from PYTHONPATH).
DIR=${1:-.xtra}; STASH=${2:-/tmp/crucible-extras}
mkdir -p "$STASH/cutlass_parts"
if [ -f "$DIR/ray/ray_site.tar.xz" ] && [ ! -d "$STASH/ray/ray" ]; then
  mkdir -p "$STASH/ray" && tar xJf "$DIR/ray/ray_site.tar.xz" -C "$STASH/ray" \
    && python3 -m pip install -q --no-index --no-deps --no-compile --target "$STASH/ray" "$DIR"/ray/wheels/*.whl
fi
[ -d "$STASH/ray/ray" ] && export PYTHONPATH="$STASH/ray:${PYTHONPATH:-}" RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
cp -n "$DIR"/cutlass/part-* "$STASH/cutlass_parts/" 2>/dev/null || true
if [ ! -d "$STASH/cutlass_dsl/nvidia_cutlass_dsl" ] && ls "$STASH"/cutlass_parts/part-* >/dev/null 2>&1; then
  mkdir -p "$STASH/cutlass_dsl"
  if cat "$STASH"/cutlass_parts/part-* | xz -t 2>/dev/null; then  # every part here: the stream is whole
    cat "$STASH"/cutlass_parts/part-* | xz -d | tar xf - -C "$STASH/cutlass_dsl"
  else
    echo "cutlass-dsl: $(ls "$STASH"/cutlass_parts | wc -l) part(s) here, not all yet" >&2
  fi
fi
if [ -d "$STASH/cutlass_dsl/nvidia_cutlass_dsl" ]; then
  export PYTHONPATH="$STASH/cutlass_dsl:$STASH/cutlass_dsl/nvidia_cutlass_dsl/dsl_packages:${PYTHONPATH:-}"
fi
python3 -c "import ray; print('ray', ray.__version__)" 2>/dev/null || echo "ray: not here"
python3 -c "import cutlass.cute; print('cutlass-dsl', cutlass.__file__)" 2>/dev/null || echo "cutlass-dsl: not here (or incomplete: import cutlass.cute fails)"
