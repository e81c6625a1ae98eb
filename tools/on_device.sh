#!/usr/bin/env bash
# Runs kiln's CUDA tests (and optionally the kiln program) on the GPU machine.
#
#   tools/on_device.sh pack [BUILD_DIR] [DEST_DIR]
#       here: packs the test binaries, the kiln program and the shared
#       libraries the device lacks (everything ldd lists but libc's family and
#       the CUDA libraries, which the device has in the same major version)
#       into DEST_DIR/pack.tar.gz (default /work/main/.device, the git-ignored
#       folder of the checkout the device tool sends), with this script beside.
#       Binaries are stripped; PACK_BENCH=0 leaves bench_cuda out.
#   tools/on_device.sh run [TESTS...]
#       there (from the checkout root, with .device carried): unpacks into
#       /tmp/kiln-device and runs each test binary (default test_backend) with
#       LD_LIBRARY_PATH set (bench_* binaries: Google Benchmark runs); logs land
#       in $OUT when set.
#   tools/on_device.sh vs-torch [ARGS...]
#       there: unpacks as `run` does, then bench/vs_torch_cuda.py --kiln (the
#       packed kiln) ARGS: kiln eager against torch eager, the ratio table
#       (the pack carries the script and tools/torch_models.py).
#
# The device tool call (kind nvidia-h200, carry [".device"]):
#   bash .device/on_device.sh run
set -euo pipefail

cmd="${1:-}"
case "$cmd" in
  pack)
    BUILD="${2:-build}"
    DEST="${3:-/work/main/.device}"
    TESTS=(test_backend)
    stage="$(mktemp -d)"
    mkdir -p "$stage/bin" "$stage/lib"
    cp "$BUILD/kiln" "$stage/bin/"
    for t in "${TESTS[@]}"; do [ -f "$BUILD/tests/$t" ] && cp "$BUILD/tests/$t" "$stage/bin/"; done
    [ -f "$BUILD/bench/bench_cuda" ] && [ "${PACK_BENCH:-1}" = 1 ] && cp "$BUILD/bench/bench_cuda" "$stage/bin/"
    # Symbols off: the device tool carries at most 64 MiB with the checkout.
    strip --strip-unneeded "$stage"/bin/*
    # Libraries: what ldd resolves, minus the C library family and CUDA's own.
    for f in "$stage"/bin/*; do ldd "$f"; done | awk '/=> \// {print $1, $3}' | sort -u |
      grep -v -E '^(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^ ]*)\.so' |
      grep -v -E '^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc|nvJitLink)\.so' |
      while read -r name path; do cp -L "$path" "$stage/lib/$name"; done
    mkdir -p "$DEST"
    tar -C "$stage" -czf "$DEST/pack.tar.gz" bin lib
    cp "$0" "$DEST/on_device.sh"
    ROOT="$(cd "$(dirname "$0")/.." && pwd)"
    mkdir -p "$DEST/bench" "$DEST/tools"
    cp "$ROOT/bench/vs_torch_cuda.py" "$DEST/bench/"
    cp "$ROOT/tools/torch_models.py" "$DEST/tools/"
    rm -rf "$stage"
    echo "packed $(du -h "$DEST/pack.tar.gz" | cut -f1) into $DEST/pack.tar.gz:" >&2
    tar -tzf "$DEST/pack.tar.gz" | tr '\n' ' ' >&2
    echo >&2
    ;;
  run|vs-torch)
    shift
    HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    DIR=/tmp/kiln-device
    rm -rf "$DIR" && mkdir -p "$DIR"
    tar -C "$DIR" -xzf "$HERE/pack.tar.gz"
    export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"
    LOG="${OUT:-$DIR}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    if [ "$cmd" = vs-torch ]; then
      PYTHONUNBUFFERED=1 python3 "$HERE/bench/vs_torch_cuda.py" --kiln "$DIR/bin/kiln" "$@"
      exit $?
    fi
    [ $# -gt 0 ] || set -- test_backend
    rc=0
    for t in "$@"; do
      echo "=== $t"
      if [[ "$t" == bench_* ]]; then
        "$DIR/bin/$t" --benchmark_min_time=0.3 2>&1 | tee "$LOG/$t.log" || rc=1
      else
        "$DIR/bin/$t" --gtest_brief=1 >"$LOG/$t.log" 2>&1 || rc=1
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests? ran" "$LOG/$t.log" | head -60 || true
      fi
    done
    exit $rc
    ;;
  *)
    sed -n 2,18p "$0"
    exit 2
    ;;
esac
