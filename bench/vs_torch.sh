#!/usr/bin/env bash
# Side-by-side speed of kiln and PyTorch (Debian's python3-torch, run with
# /usr/bin/python3) on the same cases, in the same run.
#
#   bench/vs_torch.sh --suite ops [--json] [--threads N] [--cases a,b,c] [--reps N] [--no-mmap]
#   bench/vs_torch.sh --suite train [--models tutorial,airbench[,resnet18]] [--width W]
#                     [--epochs N] [--steps N] [--batch B] [--seed S] [--json] [--threads N] [--no-mmap]
#   bench/vs_torch.sh --suite models [--models a,b] [--modes eager,default] [--phases train,eval]
#                     [--batch B] [--width W] [--rounds R] [--json] [--threads N] [--no-mmap]
#
# Builds kiln (./kiln build), installs python3-torch if missing (root: apt-get;
# otherwise prints the command and exits 1), then for each case runs kiln and
# then torch, so both sides share the machine's conditions of the moment.
#
# ops: prints a table case | kiln ms | torch ms | speedup (= torch_ms / kiln_ms)
# and the geometric mean of the speedups; --json prints one object per case with
# the keys case, kiln_ms, torch_ms, speedup, then {"geomean_speedup": X}.
#
# train: for each model, `kiln train` and bench/torch_train.py with the same
# model, recipe (docs/training.md), batch, seed and thread count on CIFAR-10.
# Without --epochs: a speed run, 1 epoch of --steps 100 (airbench: 30, resnet18: 6) training
# steps and as many test batches, at batch 128. Prints train and eval images/s
# of both sides and the speedups (kiln img/s / torch img/s); with --epochs N
# also both test accuracies (%) and their difference. --json: one object per
# model with the keys case, kiln_train_img_s, torch_train_img_s, train_speedup,
# kiln_eval_img_s, torch_eval_img_s, eval_speedup (and with --epochs
# kiln_test_acc, torch_test_acc), then {"geomean_speedup": X} over all train
# and eval speedups. CIFAR-10 is read from $KILN_DATA/cifar-10-batches-bin
# (default ./data of the repo); when it is not there, it is imported first from
# $KILN_CIFAR10_ARCHIVE (default ../shared/data/cifar10-jpeg.tar.zst).
#
# models: `kiln bench models` (eager and compiled modes, cold compile on an
# empty kernel cache, warm start) and bench/torch_bench_models.py (PyTorch
# eager, the same models, batch, threads and timing) twice: as installed and
# with glibc's malloc kept off mmap (PyTorch at its best). Prints per model and
# phase the img/s of each side and kiln / best-torch for each kiln mode; --json:
# one object per (model, phase) with kiln_<mode>_img_s, kiln_<mode>_compile_s,
# kiln_<mode>_warm_s, torch_img_s, torch_no_mmap_img_s and <mode>_vs_torch.
# --rounds R runs the three (kiln, torch, torch without mmap) R times in turn
# per model, so each side sees the load of the same minutes: img/s is then the
# median round, <mode>_vs_torch the median of the rounds' ratios, compile and
# warm seconds those of the first round (the only one on an empty cache), and
# --json adds "rounds".
#
# --no-mmap runs both sides with glibc's malloc kept off mmap (see
# docs/benchmarks.md: fresh >32 MB buffers cost page faults on every call).
# A case that fails on one side shows as an error (null in JSON), is left out
# of the geomean, and makes the script exit 1. Bad arguments exit 2.
# Environment: KILN_BUILD_DIR (as ./kiln), TORCH_PYTHON (default /usr/bin/python3),
# KILN_DATA, KILN_CIFAR10_ARCHIVE (train suite).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${TORCH_PYTHON:-/usr/bin/python3}"

usage() {
  cat <<EOF
usage: bench/vs_torch.sh --suite ops [--json] [--threads N] [--cases a,b,c] [--reps N] [--no-mmap]
       bench/vs_torch.sh --suite train [--models a,b] [--width W] [--epochs N] [--steps N] [--batch B]
                         [--seed S] [--json] [--threads N] [--no-mmap]
       bench/vs_torch.sh --suite models [--models a,b] [--modes eager,default] [--phases train,eval]
                         [--batch B] [--width W] [--rounds R] [--json] [--threads N] [--no-mmap]
  --suite ops    op-level cases (docs/benchmarks.md lists them)
  --suite train  training and evaluation of whole models on CIFAR-10 (docs/benchmarks.md)
  --suite models kiln bench models (eager and compiled) against PyTorch eager, as installed and
                 without mmap, on the same models, batch and threads
  --json         one JSON object per case (train: per model), then {"geomean_speedup": X}
  --threads N    threads on both sides (OMP_NUM_THREADS, torch.set_num_threads), default 2
  --no-mmap      both sides with glibc malloc kept off mmap (MALLOC_MMAP_MAX_=0 ...), so big
                 fresh buffers are reused instead of page-faulted in on every call
ops only:
  --cases a,b    only these cases (default: all of the suite)
  --reps N       timed repetitions per case on both sides (default: adapts to ~1.5 s per case)
train only:
  --models a,b   from tutorial, airbench, resnet18 (default: tutorial,airbench)
  --width W      airbench's width multiplier (default: kiln's default, 1)
  --epochs N     N full epochs, and the test accuracies (default: a speed run, 1 epoch of --steps)
  --steps N      training steps per epoch, and test batches (default without --epochs: 100,
                 airbench 30, resnet18 6; with --epochs: whole epochs)
  --batch B      training batch (default: 128 in a speed run, the model's recipe with --epochs)
  --seed S       seed of both sides (default 0)
models only (also --models, default tutorial,resnet18,airbench; --batch, default 128; --width):
  --modes a,b    kiln's modes: eager,default,reduce-overhead,max-autotune (default: eager,default)
  --phases a,b   train (a recipe SGD step) and/or eval (a forward) (default: train,eval)
  --rounds R     kiln, torch and torch without mmap R times in turn per model; img/s is the
                 median round, X / torch the median of the rounds' ratios (default 1)
EOF
}

die2() { echo "vs_torch.sh: $*" >&2; usage >&2; exit 2; }

suite="" json=0 threads=2 cases="" reps="" no_mmap=0
models="" width="" epochs="" steps="" batch="" seed="" modes="" phases="" rounds=1
ops_flag="" shared_flag="" models_flag="" epochs_flag=""
while [ $# -gt 0 ]; do
  arg="$1" val=""
  case "$arg" in
    --*=*) val="${arg#*=}"; arg="${arg%%=*}"; shift ;;
    --suite|--threads|--cases|--reps|--models|--width|--epochs|--steps|--batch|--seed|--modes|--phases|--rounds)
      [ $# -ge 2 ] || die2 "$arg needs a value"; val="$2"; shift 2 ;;
    *) shift ;;
  esac
  case "$arg" in
    --suite) suite="$val" ;;
    --json) json=1 ;;
    --no-mmap) no_mmap=1 ;;
    --threads) threads="$val" ;;
    --cases) cases="$val"; ops_flag="$arg" ;;
    --reps) reps="$val"; ops_flag="$arg" ;;
    --models) models="$val"; shared_flag="$arg" ;;
    --width) width="$val"; shared_flag="$arg" ;;
    --batch) batch="$val"; shared_flag="$arg" ;;
    --epochs) epochs="$val"; epochs_flag="$arg" ;;
    --steps) steps="$val"; epochs_flag="$arg" ;;
    --seed) seed="$val"; epochs_flag="$arg" ;;
    --modes) modes="$val"; models_flag="$arg" ;;
    --phases) phases="$val"; models_flag="$arg" ;;
    --rounds) rounds="$val"; models_flag="$arg" ;;
    -h|--help) usage; exit 0 ;;
    *) die2 "unknown argument '$arg'" ;;
  esac
done

case "$suite" in
  ops) [ -z "$shared_flag$epochs_flag$models_flag" ] || die2 "${shared_flag:-${epochs_flag:-$models_flag}} does not apply to --suite ops" ;;
  train) [ -z "$ops_flag$models_flag" ] || die2 "${ops_flag:-$models_flag} does not apply to --suite train" ;;
  models) [ -z "$ops_flag$epochs_flag" ] || die2 "${ops_flag:-$epochs_flag} does not apply to --suite models" ;;
  "") die2 "missing --suite (available: ops, train, models)" ;;
  *) die2 "unknown suite '$suite' (available: ops, train, models)" ;;
esac
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die2 "$1 wants a positive integer, got '$2'"; }
posint --threads "$threads"
[ -z "$reps" ] || posint --reps "$reps"
[ -z "$epochs" ] || posint --epochs "$epochs"
[ -z "$steps" ] || posint --steps "$steps"
[ -z "$batch" ] || posint --batch "$batch"
posint --rounds "$rounds"
[ -z "$seed" ] || [[ "$seed" =~ ^[0-9]+$ ]] || die2 "--seed wants a non-negative integer, got '$seed'"
if [ -n "$width" ]; then
  [[ "$width" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v w="$width" 'BEGIN { exit !(w > 0) }' \
    || die2 "--width wants a positive number, got '$width'"
fi
train_models=()
if [ "$suite" = train ] || [ "$suite" = models ]; then
  default_models=tutorial,airbench
  [ "$suite" = models ] && default_models=tutorial,resnet18,airbench
  IFS=',' read -r -a train_models <<<"${models:-$default_models}"
  [ ${#train_models[@]} -gt 0 ] || die2 "--models is empty"
  for m in "${train_models[@]}"; do
    case "$m" in
      tutorial|airbench|resnet18) ;;
      *) die2 "unknown model '$m' (available: tutorial, airbench, resnet18)" ;;
    esac
  done
fi

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

export OMP_NUM_THREADS="$threads"
if [ "$no_mmap" = 1 ]; then
  # No mmap'd chunks, no trimming of the heap top: freed big buffers stay mapped for reuse.
  export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=536870912
fi

# ---------------------------------------------------------------- models suite
if [ "$suite" = models ]; then
  kmodes="${modes:-eager,default}" kphases="${phases:-train,eval}" b="${batch:-128}"
  IFS=',' read -r -a mode_list <<<"$kmodes"
  for m in "${mode_list[@]}"; do
    case "$m" in eager|default|reduce-overhead|max-autotune) ;; *) die2 "unknown mode '$m'" ;; esac
  done
  IFS=',' read -r -a phase_list <<<"$kphases"
  for p in "${phase_list[@]}"; do
    case "$p" in train|eval) ;; *) die2 "unknown phase '$p' (available: train, eval)" ;; esac
  done
  wargs=(); [ -n "$width" ] && wargs=(--width "$width")
  if [ "$json" != 1 ]; then
    echo "vs_torch.sh --suite models: $threads thread(s), batch $b, float32, random inputs (torch with flush-to-zero)$([ "$no_mmap" = 1 ] && echo ", kiln with glibc malloc without mmap")"
    echo "  kiln: bench models, modes $kmodes (compile s: cold, on an empty kernel cache); torch: eager as installed and with malloc off mmap"
    [ "$rounds" = 1 ] || echo "  $rounds rounds of kiln, torch, torch without mmap in turn per model: median img/s, median of the rounds' ratios"
  fi
  cache_dir="$(mktemp -d)"
  trap 'rm -rf "$cache_dir"' EXIT
  lines=()
  for m in "${train_models[@]}"; do
    # An empty kernel cache per model: its first round's compile seconds are cold.
    rm -rf "$cache_dir/kc"
    for ((r = 1; r <= rounds; r++)); do
      [ "$json" = 1 ] || echo "  running $m$([ "$rounds" = 1 ] || echo ", round $r of $rounds") ..." >&2
      later=(); [ "$r" = 1 ] || later=(--no-warm)
      k="$(KILN_CACHE_DIR="$cache_dir/kc" "$KILN_BIN" bench models --json --models "$m" --modes "$kmodes" \
          --phases "$kphases" --batch "$b" "${wargs[@]}" "${later[@]}")" || echo "vs_torch.sh: kiln bench models failed for $m" >&2
      t="$(env -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_ -u MALLOC_TOP_PAD_ "$PY" "$ROOT/bench/torch_bench_models.py" \
          --models "$m" --phases "$kphases" --batch "$b" --threads "$threads" "${wargs[@]}" --label torch)" \
        || echo "vs_torch.sh: torch failed for $m" >&2
      tn="$(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=536870912 "$PY" \
          "$ROOT/bench/torch_bench_models.py" --models "$m" --phases "$kphases" --batch "$b" --threads "$threads" \
          "${wargs[@]}" --label torch_no_mmap)" || echo "vs_torch.sh: torch --no-mmap failed for $m" >&2
      lines+=("{\"round\": $r}" "$k" "$t" "$tn")
    done
  done
  printf '%s\n' "${lines[@]}" | grep '^{' | "$PY" -c '
import json, math, statistics, sys
as_json, modes, rounds = sys.argv[1] == "1", sys.argv[2].split(","), int(sys.argv[3])
# cases[(model, phase)][round][mode] = the JSON object of that run
cases, order, rnd = {}, [], 1
for line in sys.stdin:
    j = json.loads(line)
    if "model" not in j:
        rnd = j["round"]
        continue
    key = (j["model"], j["phase"])
    if key not in cases:
        cases[key] = {}
        order.append(key)
    cases[key].setdefault(rnd, {})[j["mode"]] = j
def median(vs):
    vs = [v for v in vs if v]
    return round(statistics.median(vs), 4) if len(vs) == rounds else None  # a failed round fails the case
rows, failed = [], False
for model, phase in order:
    runs = [cases[(model, phase)].get(i, {}) for i in range(1, rounds + 1)]
    rate = lambda run, mode: (run.get(mode) or {}).get("img_per_s")
    best = [max([v for v in (rate(run, "torch"), rate(run, "torch_no_mmap")) if v] or [0]) or None for run in runs]
    r = {"model": model, "phase": phase, "torch_img_s": median([rate(run, "torch") for run in runs]),
         "torch_no_mmap_img_s": median([rate(run, "torch_no_mmap") for run in runs])}
    if rounds > 1:
        r["rounds"] = rounds
    for m in modes:
        first = runs[0].get(m) or {}
        r["kiln_%s_img_s" % m] = median([rate(run, m) for run in runs])
        r["kiln_%s_compile_s" % m] = first.get("compile_s")
        r["kiln_%s_warm_s" % m] = first.get("warm_s")
        r["%s_vs_torch" % m] = median([rate(run, m) / b if rate(run, m) and b else None for run, b in zip(runs, best)])
        failed |= r["%s_vs_torch" % m] is None
    rows.append(r)
if as_json:
    for r in rows:
        print(json.dumps(r))
else:
    f = lambda v, fmt="%.1f": "error" if v is None else fmt % v
    head = ["model", "phase"] + ["kiln %s img/s" % m for m in modes] + ["torch img/s", "torch no-mmap img/s"] \
        + ["%s / torch" % m for m in modes] + ["compile s (cold) %s" % m for m in modes if m != "eager"] \
        + ["warm s %s" % m for m in modes if m != "eager"]
    table = []
    for r in rows:
        table.append([r["model"], r["phase"]] + [f(r["kiln_%s_img_s" % m]) for m in modes]
                     + [f(r["torch_img_s"]), f(r["torch_no_mmap_img_s"])]
                     + [f(r["%s_vs_torch" % m], "%.2fx") for m in modes]
                     + [f(r["kiln_%s_compile_s" % m], "%.2f") for m in modes if m != "eager"]
                     + [f(r["kiln_%s_warm_s" % m], "%.2f") for m in modes if m != "eager"])
    w = [max(len(c[i]) for c in [head] + table) for i in range(len(head))]
    fmt_row = lambda cells: " | ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(cells))
    print(fmt_row(head))
    print("-|-".join("-" * x for x in w))
    for cells in table:
        print(fmt_row(cells))
    print("X / torch = kiln img/s / the faster of the two torch runs"
          + ("" if rounds == 1 else ", the median ratio of %d rounds" % rounds)
          + ("" if not failed else "  (failed runs shown as error)"))
sys.exit(1 if failed or not rows else 0)
' "$json" "$kmodes" "$rounds"
  exit $?
fi

# ---------------------------------------------------------------- train suite
if [ "$suite" = train ]; then
  # Both sides read CIFAR-10 from the same place.
  export KILN_DATA="${KILN_DATA:-$ROOT/data}"
  cifar_dir="$KILN_DATA/cifar-10-batches-bin"
  have_cifar() {
    local f
    for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
      [ -s "$cifar_dir/$f" ] || return 1
    done
  }
  if ! have_cifar; then
    archive="${KILN_CIFAR10_ARCHIVE:-$ROOT/../shared/data/cifar10-jpeg.tar.zst}"
    if [ ! -f "$archive" ]; then
      echo "vs_torch.sh: CIFAR-10 is not in $cifar_dir and there is no archive to import it from" >&2
      echo "  (looked for $archive). Set KILN_DATA to a directory holding cifar-10-batches-bin/, or" >&2
      echo "  KILN_CIFAR10_ARCHIVE to a CIFAR-10 archive (official .tar.gz or an image-folder .tar.zst)." >&2
      exit 1
    fi
    echo "vs_torch.sh: importing CIFAR-10 from $archive into $KILN_DATA (first use)..." >&2
    "$KILN_BIN" data import cifar10 "$archive" --dir "$KILN_DATA" >&2 \
      || { echo "vs_torch.sh: 'kiln data import cifar10 $archive --dir $KILN_DATA' failed" >&2; exit 1; }
    have_cifar || { echo "vs_torch.sh: the import did not leave a complete $cifar_dir" >&2; exit 1; }
  fi

  speed=0; [ -z "$epochs" ] && speed=1
  if [ "$json" != 1 ]; then
    if [ "$speed" = 1 ]; then
      mode="speed run: 1 epoch of ${steps:-100 (airbench: 30, resnet18: 6)} steps and as many test batches of 500, batch ${batch:-128}"
    else
      mode="$epochs epoch(s)${steps:+ of $steps steps}, batch ${batch:-of each recipe}"
    fi
    echo "vs_torch.sh --suite train: $threads thread(s), float32, eager, CIFAR-10 from $cifar_dir$([ "$no_mmap" = 1 ] && echo ", glibc malloc without mmap")"
    echo "  $mode; img/s include data loading and augmentation; speedup = kiln img/s / torch img/s"
  fi

  # Both sides start from the same weights: kiln writes its initial weights
  # (--save-init), torch_train.py loads them (--init); state_dict keys match.
  init_dir="$(mktemp -d)"
  trap 'rm -rf "$init_dir"' EXIT

  # The final JSON object of one side (the one with "wall_s"), or nothing on failure;
  # its per-epoch lines go to stderr as progress.
  run_train_side() {  # run_train_side kiln|torch MODEL ARGS...
    local side="$1" m="$2" out rc=0; shift 2
    if [ "$side" = kiln ]; then
      out="$("$KILN_BIN" train "$@")" || rc=$?
    else
      out="$("$PY" "$ROOT/bench/torch_train.py" "$@" --threads "$threads")" || rc=$?
    fi
    [ "$json" = 1 ] || printf '%s\n' "$out" | grep '^{' | grep -v '"wall_s"' | sed "s/^/    $side $m: /" >&2 || true
    if [ "$rc" -ne 0 ]; then
      echo "vs_torch.sh: $side side of $m failed (exit $rc)" >&2
      return 0
    fi
    printf '%s\n' "$out" | grep '^{' | grep '"wall_s"' | tail -n1 || true
  }

  results=()
  for m in "${train_models[@]}"; do
    args=(--model "$m" --data cifar10 --epochs "${epochs:-1}" --json)
    st="$steps"
    if [ -z "$st" ] && [ "$speed" = 1 ]; then
      case "$m" in tutorial) st=100 ;; resnet18) st=6 ;; *) st=30 ;; esac
    fi
    [ -n "$st" ] && args+=(--steps "$st")
    b="$batch"
    [ -z "$b" ] && [ "$speed" = 1 ] && b=128
    [ -n "$b" ] && args+=(--batch "$b")
    [ -n "$seed" ] && args+=(--seed "$seed")
    [ -n "$width" ] && [ "$m" = airbench ] && args+=(--width "$width")
    [ "$json" = 1 ] || echo "  running $m: ${args[*]} ..." >&2
    init="$init_dir/$m.safetensors"
    k="$(run_train_side kiln "$m" "${args[@]}" --save-init "$init")"
    if [ -s "$init" ]; then
      t="$(run_train_side torch "$m" "${args[@]}" --init "$init")"
    else
      t="$(run_train_side torch "$m" "${args[@]}")"
    fi
    results+=("$m"$'\t'"$k"$'\t'"$t")
  done

  printf '%s\n' "${results[@]}" | "$PY" -c '
import json, math, sys
as_json, with_acc = sys.argv[1] == "1", sys.argv[2] == "1"
def acc(v):  # both sides print test_acc as a fraction in [0, 1]; shown in percent
    return None if v is None else 100.0 * v
rows, speedups, failed = [], [], False
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        continue
    name, k, t = (line.split("\t") + ["", ""])[:3]
    k = json.loads(k) if k else {}
    t = json.loads(t) if t else {}
    r = {"case": name,
         "kiln_train_img_s": k.get("train_img_per_s"), "torch_train_img_s": t.get("train_img_per_s"),
         "kiln_eval_img_s": k.get("eval_img_per_s"), "torch_eval_img_s": t.get("eval_img_per_s")}
    for what in ("train", "eval"):
        kv, tv = r["kiln_%s_img_s" % what], r["torch_%s_img_s" % what]
        r["%s_speedup" % what] = kv / tv if kv and tv else None
        failed |= r["%s_speedup" % what] is None
        if r["%s_speedup" % what] is not None:
            speedups.append(r["%s_speedup" % what])
    if with_acc:
        r["kiln_test_acc"], r["torch_test_acc"] = acc(k.get("test_acc")), acc(t.get("test_acc"))
        failed |= r["kiln_test_acc"] is None or r["torch_test_acc"] is None
    rows.append(r)
geo = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
r4 = lambda v: None if v is None else round(v, 4)
keys = ["case", "kiln_train_img_s", "torch_train_img_s", "train_speedup",
        "kiln_eval_img_s", "torch_eval_img_s", "eval_speedup"] + (["kiln_test_acc", "torch_test_acc"] if with_acc else [])
if as_json:
    for r in rows:
        print(json.dumps({key: (r[key] if key == "case" else r4(r[key])) for key in keys}))
    print(json.dumps({"geomean_speedup": r4(geo)}))
else:
    num = lambda v, fmt="%.1f": "error" if v is None else fmt % v
    head = ["model", "kiln train img/s", "torch train img/s", "train speedup",
            "kiln eval img/s", "torch eval img/s", "eval speedup"]
    if with_acc:
        head += ["kiln acc %", "torch acc %", "acc diff (pts)"]
    table = []
    for r in rows:
        cells = [r["case"], num(r["kiln_train_img_s"]), num(r["torch_train_img_s"]), num(r["train_speedup"], "%.2fx"),
                 num(r["kiln_eval_img_s"]), num(r["torch_eval_img_s"]), num(r["eval_speedup"], "%.2fx")]
        if with_acc:
            ka, ta = r["kiln_test_acc"], r["torch_test_acc"]
            cells += [num(ka, "%.2f"), num(ta, "%.2f"), "error" if ka is None or ta is None else "%+.2f" % (ka - ta)]
        table.append(cells)
    w = [max(len(c[i]) for c in [head] + table) for i in range(len(head))]
    fmt_row = lambda cells: " | ".join(c.ljust(w[0]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(cells))
    print(fmt_row(head))
    print("-|-".join("-" * x for x in w))
    for cells in table:
        print(fmt_row(cells))
    print("geomean speedup (kiln img/s / torch img/s, train and eval): %s" % ("n/a" if geo is None else "%.2fx" % geo)
          + ("" if not failed else "  (failed runs left out)"))
sys.exit(1 if failed else 0)
' "$json" "$([ "$speed" = 1 ] && echo 0 || echo 1)"
  exit $?
fi

# ---------------------------------------------------------------- ops suite
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
