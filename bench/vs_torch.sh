#!/usr/bin/env bash
# Side-by-side speed of kiln and PyTorch (Debian's python3-torch, run with
# /usr/bin/python3) on the same cases, in the same run.
#
#   bench/vs_torch.sh --suite ops [--json] [--threads N] [--cases a,b,c] [--reps N] [--no-mmap]
#
# Builds kiln (./kiln build), installs python3-torch if missing (root: apt-get;
# otherwise prints the command and exits 1), then for each case runs kiln and
# then torch, so both sides share the machine's conditions of the moment.
# Prints a table case | kiln ms | torch ms | speedup (= torch_ms / kiln_ms) and
# the geometric mean of the speedups; --json prints one object per case with
# the keys case, kiln_ms, torch_ms, speedup, then {"geomean_speedup": X}.
# --no-mmap runs both sides with glibc's malloc kept off mmap (see
# docs/benchmarks.md: fresh >32 MB buffers cost page faults on every call).
# A case that fails on one side shows as an error (null in JSON), is left out
# of the geomean, and makes the script exit 1. Bad arguments exit 2.
# Environment: KILN_BUILD_DIR (as ./kiln), TORCH_PYTHON (default /usr/bin/python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${TORCH_PYTHON:-/usr/bin/python3}"

usage() {
  cat <<EOF
usage: bench/vs_torch.sh --suite ops [--json] [--threads N] [--cases a,b,c] [--reps N] [--no-mmap]
  --suite ops    op-level cases (docs/benchmarks.md lists them); 'train' is not available yet
  --json         one JSON object per case, then {"geomean_speedup": X}
  --threads N    threads on both sides (OMP_NUM_THREADS, torch.set_num_threads), default 2
  --cases a,b    only these cases (default: all of the suite)
  --reps N       timed repetitions per case on both sides (default: adapts to ~1.5 s per case)
  --no-mmap      both sides with glibc malloc kept off mmap (MALLOC_MMAP_MAX_=0 ...), so big
                 fresh buffers are reused instead of page-faulted in on every call
EOF
}

die2() { echo "vs_torch.sh: $*" >&2; usage >&2; exit 2; }

suite="" json=0 threads=2 cases="" reps="" no_mmap=0
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) [ $# -ge 2 ] || die2 "--suite needs a value"; suite="$2"; shift 2 ;;
    --suite=*) suite="${1#*=}"; shift ;;
    --json) json=1; shift ;;
    --no-mmap) no_mmap=1; shift ;;
    --threads) [ $# -ge 2 ] || die2 "--threads needs a value"; threads="$2"; shift 2 ;;
    --threads=*) threads="${1#*=}"; shift ;;
    --cases) [ $# -ge 2 ] || die2 "--cases needs a value"; cases="$2"; shift 2 ;;
    --cases=*) cases="${1#*=}"; shift ;;
    --reps) [ $# -ge 2 ] || die2 "--reps needs a value"; reps="$2"; shift 2 ;;
    --reps=*) reps="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die2 "unknown argument '$1'" ;;
  esac
done

case "$suite" in
  ops) ;;
  train) echo "vs_torch.sh: --suite train is not implemented yet (a later issue adds it); use --suite ops" >&2; exit 2 ;;
  "") die2 "missing --suite (available: ops)" ;;
  *) die2 "unknown suite '$suite' (available: ops)" ;;
esac
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die2 "--threads wants a positive integer, got '$threads'"
[ -z "$reps" ] || [[ "$reps" =~ ^[1-9][0-9]*$ ]] || die2 "--reps wants a positive integer, got '$reps'"

# PyTorch: Debian's python3-torch, installed the way ./kiln installs its packages.
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "vs_torch.sh: PyTorch (Debian's python3-torch) is missing. Install it with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y python3-torch" >&2
    exit 1
  fi
  echo "vs_torch.sh: installing python3-torch (first use)..." >&2
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-torch >&2
fi
"$PY" -c "import torch" 2>/dev/null || { echo "vs_torch.sh: $PY cannot import torch" >&2; exit 1; }

"$ROOT/kiln" build
BUILD="${KILN_BUILD_DIR:-$ROOT/build}"
KILN_BIN="$BUILD/kiln"
[ -x "$KILN_BIN" ] || { echo "vs_torch.sh: no kiln program at $KILN_BIN after the build" >&2; exit 1; }

# The suite's cases come from kiln; torch_ops.py must know the same names.
mapfile -t all_cases < <("$KILN_BIN" bench ops --list | cut -f1)
if [ -z "$cases" ]; then
  selected=("${all_cases[@]}")
else
  IFS=',' read -r -a selected <<<"$cases"
  for c in "${selected[@]}"; do
    printf '%s\n' "${all_cases[@]}" | grep -qxF -- "$c" || die2 "unknown case '$c' (available: ${all_cases[*]})"
  done
fi

export OMP_NUM_THREADS="$threads"
if [ "$no_mmap" = 1 ]; then
  # No mmap'd chunks, no trimming of the heap top: freed big buffers stay mapped for reuse.
  export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=536870912
fi
common=(--json)
[ -n "$reps" ] && common+=(--reps "$reps")

# Runs one side of one case; prints its JSON line, or nothing on failure.
run_side() {  # run_side kiln|torch CASE
  local out
  if [ "$1" = kiln ]; then
    out="$("$KILN_BIN" bench ops "${common[@]}" --cases "$2")" || true
  else
    out="$("$PY" "$ROOT/bench/torch_ops.py" "${common[@]}" --threads "$threads" --cases "$2")" || true
  fi
  printf '%s\n' "$out" | grep -m1 '^{' || true
}

results=()
[ "$json" = 1 ] || echo "vs_torch.sh --suite ops: $threads thread(s), float32, NCHW, eager$([ "$no_mmap" = 1 ] && echo ", glibc malloc without mmap"); ms = median per iteration"
for c in "${selected[@]}"; do
  [ "$json" = 1 ] || echo "  running $c ..." >&2
  k="$(run_side kiln "$c")"
  t="$(run_side torch "$c")"
  results+=("$c"$'\t'"$k"$'\t'"$t")
done

# Format (table or JSON) and compute the geomean in Python: the torch
# interpreter is at hand and parses JSON properly.
printf '%s\n' "${results[@]}" | "$PY" -c '
import json, math, sys
as_json = sys.argv[1] == "1"
rows, failed = [], False
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        continue
    name, k, t = (line.split("\t") + ["", ""])[:3]
    k_ms = json.loads(k).get("kiln_ms") if k else None
    t_ms = json.loads(t).get("torch_ms") if t else None
    sp = t_ms / k_ms if k_ms and t_ms else None
    failed |= sp is None
    rows.append((name, k_ms, t_ms, sp))
ok = [r[3] for r in rows if r[3] is not None]
geo = math.exp(sum(map(math.log, ok)) / len(ok)) if ok else None
r4 = lambda v: None if v is None else round(v, 4)
if as_json:
    for name, k_ms, t_ms, sp in rows:
        print(json.dumps({"case": name, "kiln_ms": r4(k_ms), "torch_ms": r4(t_ms), "speedup": r4(sp)}))
    print(json.dumps({"geomean_speedup": r4(geo)}))
else:
    f = lambda v: "error" if v is None else "%.3f" % v
    w = max([len("case")] + [len(r[0]) for r in rows])
    print("%-*s | %10s | %10s | %8s" % (w, "case", "kiln ms", "torch ms", "speedup"))
    print("%s-|-%s-|-%s-|-%s" % ("-" * w, "-" * 10, "-" * 10, "-" * 8))
    for name, k_ms, t_ms, sp in rows:
        print("%-*s | %10s | %10s | %8s" % (w, name, f(k_ms), f(t_ms), "error" if sp is None else "%.2fx" % sp))
    print("geomean speedup (torch_ms / kiln_ms): %s" % ("n/a" if geo is None else "%.2fx" % geo)
          + ("" if not failed else "  (failed cases left out)"))
sys.exit(1 if failed else 0)
' "$json"
