#!/usr/bin/env bash
# The GPU checks of the CUDA back end, made for one prepared run on a GPU machine that may have
# no packages and returns only what is written under $OUT: every check under one deadline, every
# log and a summary.json kept, one summary table at the end. What it runs, in order:
#   1. kernel parity: every Kernels op on CUDA against the CPU back end (zt_runtime_tests Cuda*);
#      the test binary's exit code and its counts, no test skipped
#   2. GPT-2 124M bf16 on one GPU (zt-bench train --json): tokens/s; the losses finite and
#      falling (first vs last); MFU against its 45% target (below-target, not ok, when below)
#   3. the same with activation checkpointing: step-time ratio, activation-peak ratio (< 1) and
#      the losses bitwise equal to the plain run's (same model, batch and seed)
#   4. 2 ranks on the one GPU (MPI with host staging), fp32 zt-train: ZeRO stage 3's losses
#      bitwise equal to stage 0's, finite and falling; within 1e-4 relative of the CPU back end
#   5. NCCL with one rank (zt_mpi_device_comm_tests and zt_mpi_device_engine_tests
#      NcclCommunicator.*; the watchdog test that needs two ranks is filtered out)
#   6. PyTorch on the same GPU, same model and batch (bf16 autocast, fused SDPA): its tokens/s
#      beside ours (below-target when ours is lower); skipped when `import torch` fails
# --dry-run runs the same script on the CPU back end with tiny shapes and no GPU (gpt2-tiny,
# CPU kernel tests for 1, host staging and the scrambled device for 5, the CPU against itself
# for 4, no PyTorch) so that its plumbing (deadline, $OUT, summary.json, verdicts) is tested in
# CI: ctest -R e2e.device_check_dry_run (tests/e2e/device_check_dry_run.sh).
#
# Preflight (before any check; each missing thing one line, exit 2): nvidia-smi and a GPU, a
# driver whose CUDA version is at least the major version of the runtime we were built with
# (CUDA minor-version compatibility), every shared library of our binaries resolved by ldd,
# `mpirun -np 2 true`, python3. (Dry run: no GPU or driver needed.)
#
# Deadline: at most ZT_CHECK_BUDGET_S seconds in all (default 300), counted from the script's
# start (unpacking the bundle and the preflight count too); each check runs under min(its own
# limit, what is left), and once the budget is spent each remaining check is recorded as
# skipped with the reason.
#
# Output: $OUT when set, else build/device-check-<UTC time>, kept and printed: one log per
# command (parity.txt, plain.json, gpu_s3/metrics.jsonl, ...), summary.json ({gpu, driver,
# elapsed_s, checks: [{name, value, verdict, seconds}], ...}) and summary.txt (the table).
#
# A GPU machine may have no package access: build here, run scripts/bundle_device.sh, carry
# build/device-bundle.tar.xz and data/corpus; this script unpacks the bundle, points PATH,
# LD_LIBRARY_PATH and OPAL_PREFIX at it and finds cuBLAS and NCCL in the CUDA toolkit or in
# Python's site-packages (nvidia-* wheels). Without a bundle it uses build/ and the system.
# Python (torch, the JSON helpers) runs with the LD_LIBRARY_PATH this script was started with,
# so the bundle's libraries cannot break torch. Open MPI gets the settings of a machine without
# InfiniBand: ob1 over shared memory (self,vader), no UCX, root and oversubscription allowed.
#
# Usage: [OUT=DIR] [ZT_CHECK_BUDGET_S=300] tests/gpu/device_check.sh [--dry-run] [BATCH] [SEQ_LEN]
#   (defaults: 16 1024; dry run 2 32). Exit 0 when no check FAILed (ok, skipped and
#   below-target rows pass), 1 when one did, 2 when the preflight or the arguments failed.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

dry=0
args=()
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    -h | --help) sed -n '2,/^set -u$/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "device_check: unknown option $a (see --help)" >&2; exit 2 ;;
    *) args+=("$a") ;;
  esac
done
if [ $dry -eq 1 ]; then
  B=${args[0]:-2} T=${args[1]:-32}
else
  B=${args[0]:-16} T=${args[1]:-1024}
fi
budget=${ZT_CHECK_BUDGET_S:-300}
for n in "$B" "$T" "$budget"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "device_check: BATCH, SEQ_LEN and ZT_CHECK_BUDGET_S must be whole numbers; got '$n'" >&2; exit 2; }
done
build=${ZT_BUILD_DIR:-$root/build}
t0=$SECONDS

# ---- where everything goes: kept, never a deleted temp dir -------------------------------------
if [ -n "${OUT:-}" ]; then
  out=$OUT
else
  out=$build/device-check-$(date -u +%Y%m%dT%H%M%SZ)
fi
mkdir -p "$out" || { echo "device_check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
echo "device_check: logs and summary.json in $out (kept)"

# Python without the bundle's libraries: the LD_LIBRARY_PATH we were started with, or none.
if [ -n "${LD_LIBRARY_PATH+set}" ]; then
  py_env=("LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
else
  py_env=(-u LD_LIBRARY_PATH)
fi
py() { env "${py_env[@]}" python3 "$@"; }

# ---- results -----------------------------------------------------------------------------------
names=() values=() verdicts=() secs=()
failed=0
check_t0=$SECONDS
note() {  # name value verdict (ok, FAIL, skipped, below-target)
  names+=("$1") values+=("$2") verdicts+=("$3") secs+=("$((SECONDS - check_t0))")
  [ "$3" = FAIL ] && failed=1
  echo "== $1: $2 [$3]"
}
json_str() {
  local s
  s=$(printf '%s' "$1" | tr '\t\n\r' '   ' | tr -d '\000-\037')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}
gpu="none" driver="none" driver_cuda="none"
write_summary() {
  local i sep=""
  {
    printf '{\n  "mode": %s,\n  "gpu": %s,\n  "driver": %s,\n  "driver_cuda": %s,\n' \
      "$(json_str "$([ $dry -eq 1 ] && echo dry-run || echo gpu)")" "$(json_str "$gpu")" \
      "$(json_str "$driver")" "$(json_str "$driver_cuda")"
    printf '  "batch": %s,\n  "seq_len": %s,\n  "budget_s": %s,\n  "elapsed_s": %s,\n' \
      "$B" "$T" "$budget" "$((SECONDS - t0))"
    printf '  "failed": %s,\n  "checks": [' "$failed"
    for i in "${!names[@]}"; do
      printf '%s\n    {"name": %s, "value": %s, "verdict": %s, "seconds": %s}' "$sep" \
        "$(json_str "${names[$i]}")" "$(json_str "${values[$i]}")" \
        "$(json_str "${verdicts[$i]}")" "${secs[$i]}"
      sep=","
    done
    printf '\n  ]\n}\n'
  } > "$out/summary.json"
  {
    echo "device_check$([ $dry -eq 1 ] && echo ' --dry-run (CPU back end)') on $gpu" \
      "(driver $driver, CUDA $driver_cuda), B=$B T=$T, $((SECONDS - t0)) s of $budget s"
    printf '%-38s %-72s %-12s %s\n' check result verdict seconds
    for i in "${!names[@]}"; do
      printf '%-38s %-72s %-12s %s\n' "${names[$i]}" "${values[$i]}" "${verdicts[$i]}" "${secs[$i]}"
    done
    echo "outputs: $out (summary.json, one log per command)"
  } > "$out/summary.txt"
  echo
  cat "$out/summary.txt"
}

# ---- the deadline --------------------------------------------------------------------------------
check_end=0
# run_check OWN_LIMIT_S NAME FUNCTION: FUNCTION under min(OWN_LIMIT_S, what is left of the
# budget); once the budget is spent, NAME is recorded as skipped instead.
run_check() {
  local own=$1 name=$2 fn=$3 left
  left=$((budget - (SECONDS - t0)))
  check_t0=$SECONDS
  if [ "$left" -le 0 ]; then
    note "$name" "not run: the ${budget} s budget (ZT_CHECK_BUDGET_S) was spent" skipped
    return
  fi
  check_end=$((SECONDS + (own < left ? own : left)))
  "$fn"
}
# tmo COMMAND...: COMMAND under what is left of the current check's limit (exit 124 when it ran
# out, without running it when nothing is left).
tmo() {
  local left=$((check_end - SECONDS))
  [ "$left" -gt 0 ] || return 124
  timeout -k 10 "$left" "$@"
}
# what_failed LOG...: each log's first line from one of our tools ("zt-train: rank 0: ..."), else
# its last line that is not mpirun's rule
what_failed() {
  local f line
  for f in "$@"; do
    line=$(grep -m 1 '^zt-[a-z]*: ' "$f" 2> /dev/null)
    [ -n "$line" ] || line=$(grep -v '^ *$\|^-----' "$f" 2> /dev/null | tail -n 1)
    printf '%s: %s; ' "$(basename "$f")" "$line"
  done
}
why() {  # exit code -> words
  case $1 in
    0) echo "exit 0" ;;
    124 | 137) echo "timed out (the check's limit, min(own, budget left))" ;;
    *) echo "exit $1" ;;
  esac
}

# ---- environment: bundle, libraries, Open MPI ---------------------------------------------------
bundle=$build/device-bundle
unpack_error=""
if [ -f "$build/device-bundle.tar.xz" ] && [ ! -d "$bundle" ] && [ $dry -eq 0 ]; then
  if ! tar -C "$build" -xJf "$build/device-bundle.tar.xz" > "$out/unpack.txt" 2>&1; then
    unpack_error="cannot unpack $build/device-bundle.tar.xz: $(tail -n 1 "$out/unpack.txt")"
    rm -rf "$bundle"
  fi
fi
if [ -d "$bundle" ] && [ $dry -eq 0 ]; then
  bin=$bundle/bin
  test_dirs=("$bundle/bin")
  export OPAL_PREFIX=$bundle/openmpi
  export PATH=$bundle/openmpi/bin:$PATH
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  bin=$build/bin
  test_dirs=("$build/tests" "$build/tests/mpi")
fi
find_test() {
  local d
  for d in "${test_dirs[@]}"; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done
}
if [ $dry -eq 0 ]; then
  # cuBLAS and NCCL of the major version we were built with: the toolkit, else pip's wheels.
  search=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
          /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu)
  if command -v python3 > /dev/null; then
    while read -r d; do search+=("$d"); done < <(py - << 'PY' 2> /dev/null
import glob, site, os
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for d in glob.glob(os.path.join(s, "nvidia", "*", "lib")):
        print(d)
PY
    )
  fi
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    for d in "${search[@]}"; do
      if [ -e "$d/$lib" ]; then
        case ":${LD_LIBRARY_PATH:-}:" in
          *":$d:"*) ;;
          *) export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
        esac
        break
      fi
    done
  done
fi
# Open MPI on a machine without InfiniBand: ob1 over self and shared memory, no UCX (its
# transports probe for hardware that is not there and can hang or abort), no single-copy
# mechanism (CMA is often blocked in containers), as root, more ranks than slots allowed.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_MCA_coll_hcoll_enable=0
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
export GTEST_COLOR=no  # mpirun gives ranks a terminal: plain lines for the counts below

# ---- preflight -----------------------------------------------------------------------------------
problems=()
[ -z "$unpack_error" ] || problems+=("$unpack_error")
version_ge() {  # A >= B, as major.minor
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, "."); split(b, y, ".");
    exit !((x[1] + 0 > y[1] + 0) || (x[1] + 0 == y[1] + 0 && x[2] + 0 >= y[2] + 0)) }'
}
if [ $dry -eq 0 ]; then
  if ! command -v nvidia-smi > /dev/null; then
    problems+=("no GPU: nvidia-smi is not on PATH (no NVIDIA driver here)")
  else
    line=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -n 1)
    gpu=${line%%,*} driver=${line##*, }
    if [ -z "$line" ]; then
      gpu="none" driver="none"
      problems+=("no GPU: nvidia-smi lists none ($(nvidia-smi 2>&1 | head -n 1))")
    fi
    driver_cuda=$(nvidia-smi 2> /dev/null | grep -o 'CUDA Version: *[0-9.]*' | grep -o '[0-9.]*$')
    # The runtime we were built with (the bundle records it; else this build's nvcc).
    runtime=$(cat "$bundle/cuda_version" 2> /dev/null ||
              sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")$/\1/p' \
                "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2> /dev/null | head -n 1)
    runtime=${runtime:-13.0}
    need="${runtime%%.*}.0"
    if [ -z "$driver_cuda" ]; then
      problems+=("driver: nvidia-smi reports no CUDA version; the CUDA $runtime runtime needs a driver for CUDA >= $need")
    elif ! version_ge "$driver_cuda" "$need"; then
      problems+=("driver too old: $driver supports CUDA $driver_cuda; the bundled CUDA $runtime runtime needs >= $need (update the driver or build with an older toolkit)")
    fi
  fi
fi
command -v python3 > /dev/null || problems+=("python3 is not on PATH (the JSON helpers need it)")
command -v mpirun > /dev/null || problems+=("mpirun is not on PATH (carry the bundle: scripts/bundle_device.sh)")
binaries=()
for b in "$bin/zt-train" "$bin/zt-bench"; do
  if [ -x "$b" ]; then binaries+=("$b"); else problems+=("no $b: build it (or carry the bundle)"); fi
done
for t in zt_runtime_tests zt_mpi_device_comm_tests zt_mpi_device_engine_tests; do
  f=$(find_test "$t")
  [ -n "$f" ] && binaries+=("$f")
done
for b in "${binaries[@]}"; do
  while read -r lib; do
    problems+=("$(basename "$b"): $lib not found by ldd (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})")
  done < <(ldd "$b" 2> /dev/null | awk '/not found/ {print $1}')
done
if command -v mpirun > /dev/null; then
  if ! timeout 60 mpirun -np 2 true > "$out/mpirun_true.txt" 2>&1; then
    problems+=("mpirun -np 2 true failed: $(grep -v '^ *$' "$out/mpirun_true.txt" | tail -n 1) (log: mpirun_true.txt)")
  fi
fi
echo "device_check: $([ $dry -eq 1 ] && echo 'dry run on the CPU back end' || echo "$gpu, driver $driver (CUDA $driver_cuda)"); binaries from $bin; B=$B T=$T; budget $budget s"
if [ "${#problems[@]}" -gt 0 ]; then
  check_t0=$SECONDS
  for p in "${problems[@]}"; do
    echo "device_check: preflight: $p" >&2
    note preflight "$p" FAIL > /dev/null
  done
  write_summary
  exit 2
fi

# ---- helpers over our JSON and logs (python without the bundle) ----------------------------------
# bench_field FILE KEY: rows[0][KEY] of a zt-bench train --json file; peak_activation_bytes
# falls back to the CPU layout's peak_bytes.activations.
bench_field() {
  py - "$1" "$2" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
k = sys.argv[2]
if k == "peak_activation_bytes" and k not in r:
    print(r["peak_bytes"]["activations"])
elif k == "mfu" and k not in r:
    print(r["fraction_of_peak"])   # CPU: the measured fp32 FMA peak stands in for the GPU's
else:
    print(r[k])
PY
}
# bench_losses FILE: the losses, one a line
bench_losses() { py -c 'import json,sys; [print(repr(x)) for x in json.load(open(sys.argv[1]))["rows"][0]["losses"]]' "$1"; }
# metrics_losses DIR: the training losses of a zt-train run, one a line
metrics_losses() { grep -o '"loss":[-0-9.eE+naif]*' "$1/metrics.jsonl" 2> /dev/null | cut -d: -f2; }
# falling: stdin's numbers are all finite and the last is below the first -> "ok", else a reason
falling() {
  py -c '
import math, sys
v = [float(x) for x in sys.stdin.read().split()]
if len(v) < 2: print("fewer than 2 losses")
elif not all(math.isfinite(x) for x in v): print("a loss is not finite")
elif not v[-1] < v[0]: print("loss did not fall: %.4f -> %.4f" % (v[0], v[-1]))
else: print("ok")'
}
# gtest_counts LOG: "passed failed skipped" from GoogleTest's closing summary
gtest_counts() {
  local p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$1" | tail -n 1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -n 1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -n 1)
  echo "${p:-0} ${f:-0} ${s:-0}"
}

if [ $dry -eq 1 ]; then
  device=cpu model=gpt2-tiny steps=3 warmup=1 train_steps=6 mfu_target=${ZT_MFU_TARGET:-0}
  # Tiny shapes gain nothing from more threads, and a busy CI machine's cores are shared.
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  train_shape=(--set train_micro_batch_size_per_gpu=2 --set zt.seq_len=32)
else
  device=cuda model=gpt2-124M steps=10 warmup=3 train_steps=20 mfu_target=${ZT_MFU_TARGET:-0.45}
  train_shape=()
fi

# ---- 1. kernel parity ----------------------------------------------------------------------------
check_parity() {
  local rt filter rc p f s v
  rt=$(find_test zt_runtime_tests)
  [ -n "$rt" ] || { note "$parity_name" "no zt_runtime_tests binary" FAIL; return; }
  if [ $dry -eq 1 ]; then
    filter='KernelsTest.*'
  else
    # CudaFactory.MakeDeviceWithoutGpu* checks the error without a GPU and skips whenever one is
    # visible: excluded, so that any skip left is a failure.
    filter='Cuda*:-CudaFactory.MakeDeviceWithoutGpu*'
  fi
  tmo "$rt" --gtest_filter="$filter" > "$out/parity.txt" 2>&1
  rc=$?
  read -r p f s < <(gtest_counts "$out/parity.txt")
  if [ $rc -eq 0 ] && [ "$p" -gt 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then v=ok; else v=FAIL; fi
  note "$parity_name" "$p passed, $f failed, $s skipped, $(why $rc) ($filter)" $v
  grep '^\[  FAILED  \] [A-Za-z]' "$out/parity.txt" | sort -u | head -n 20
}

# ---- 2, 3. training steps: tokens/s, losses, MFU; with checkpointing ------------------------------
bench() {  # name, extra args
  local name=$1
  shift
  tmo "$bin/zt-bench" train --device "$device" --model "$model" -B "$B" -T "$T" \
    --precision bf16 --steps "$steps" --warmup "$warmup" --json "$out/$name.json" "$@" \
    > "$out/$name.txt" 2>&1
}
plain_ok=0
check_training() {
  local rc tps mfu verdict fall
  bench plain
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$out/plain.json" ]; then
    note "$train_name" "zt-bench failed, $(why $rc): $(what_failed "$out/plain.txt")" FAIL
    note "MFU (target $(py -c "print('%g%%' % (100 * $mfu_target))"))" "no measurement" skipped
    return
  fi
  tps=$(bench_field "$out/plain.json" tokens_per_s)
  fall=$(bench_losses "$out/plain.json" | falling)
  [ "$fall" = ok ] && verdict=ok || verdict=FAIL
  note "$train_name" "$(printf '%.0f tokens/s; losses %s -> %s: %s' "$tps" \
    "$(bench_losses "$out/plain.json" | head -n 1 | cut -c1-7)" \
    "$(bench_losses "$out/plain.json" | tail -n 1 | cut -c1-7)" "$fall")" $verdict
  [ $verdict = ok ] && plain_ok=1
  mfu=$(bench_field "$out/plain.json" mfu)
  verdict=$(py -c "print('ok' if $mfu >= $mfu_target else 'below-target')")
  note "MFU (target $(py -c "print('%g%%' % (100 * $mfu_target))"))" "$(py -c "print('%.1f%%' % (100 * $mfu))")$([ $dry -eq 1 ] && echo ' of the CPU fp32 peak (dry run stand-in)')" "$verdict"
}
check_checkpointing() {
  local rc ratio act same v
  if [ ! -s "$out/plain.json" ]; then
    note "$ckpt_name" "no plain run to compare with" FAIL
    return
  fi
  bench ckpt --checkpoint
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$out/ckpt.json" ]; then
    note "$ckpt_name" "zt-bench --checkpoint failed, $(why $rc): $(what_failed "$out/ckpt.txt")" FAIL
    return
  fi
  ratio=$(py -c "print('%.2f' % ($(bench_field "$out/ckpt.json" ms_per_step) / $(bench_field "$out/plain.json" ms_per_step)))")
  act=$(py -c "print('%.3f' % ($(bench_field "$out/ckpt.json" peak_activation_bytes) / max(1, $(bench_field "$out/plain.json" peak_activation_bytes))))")
  if [ "$(bench_losses "$out/ckpt.json")" = "$(bench_losses "$out/plain.json")" ]; then
    same="losses bitwise equal"
  else
    same="losses DIFFER from the plain run's"
  fi
  if [ "$same" = "losses bitwise equal" ] && py -c "import sys; sys.exit(not $act < 1)"; then v=ok; else v=FAIL; fi
  note "$ckpt_name" "step time x$ratio, activation peak x$act (< 1 needed), $same" $v
}

# ---- 4. two ranks, stage 3 vs stage 0 vs the CPU back end ---------------------------------------
train() {  # name, extra --set args
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  tmo mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps="$train_steps" --set zt.eval_every=0 \
    --set zt.val_data='""' --set steps_per_print=100 \
    --set scheduler.params.warmup_num_steps=2 --set scheduler.params.total_num_steps="$train_steps" \
    "${train_shape[@]}" "$@" > "$out/$name.txt" 2>&1
}
check_two_ranks() {
  local rc1 rc2 rc3 n fall v worst
  if [ ! -f data/corpus/train.bin ]; then
    note "$ranks_name" "data/corpus missing: carry it (scripts/fetch_data.sh here)" FAIL
    note "$vs_cpu_name" "data/corpus missing" FAIL
    return
  fi
  local dev=(--set zt.device="$device" --set zt.comm_backend=mpi)
  train dev_s0 "${dev[@]}" --set zero_optimization.stage=0; rc1=$?
  train dev_s3 "${dev[@]}" --set zero_optimization.stage=3; rc2=$?
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
    note "$ranks_name" "zt-train failed: stage 0 $(why $rc1), stage 3 $(why $rc2): $(what_failed "$out/dev_s0.txt" "$out/dev_s3.txt")" FAIL
  else
    n=$(metrics_losses "$out/dev_s3" | wc -l)
    fall=$(metrics_losses "$out/dev_s3" | falling)
    if [ "$n" -eq "$train_steps" ] && [ "$(metrics_losses "$out/dev_s0")" = "$(metrics_losses "$out/dev_s3")" ] && [ "$fall" = ok ]; then
      v=ok
    else
      v=FAIL
    fi
    note "$ranks_name" "$n of $train_steps losses, stage 3 $([ "$(metrics_losses "$out/dev_s0")" = "$(metrics_losses "$out/dev_s3")" ] && echo '=' || echo '!=') stage 0 bitwise; falling: $fall" $v
  fi
  train cpu_s0 --set zt.device=cpu --set zero_optimization.stage=0; rc3=$?
  if [ $rc1 -ne 0 ] || [ $rc3 -ne 0 ]; then
    note "$vs_cpu_name" "zt-train failed: $device $(why $rc1), cpu $(why $rc3): $(what_failed "$out/dev_s0.txt" "$out/cpu_s0.txt")" FAIL
    return
  fi
  worst=$(paste <(metrics_losses "$out/dev_s0") <(metrics_losses "$out/cpu_s0") |
          awk 'NF != 2 {bad = 1} {d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d}
               END {if (bad || NR == 0) print "nan"; else printf "%.2e", m}')
  v=$(awk -v w="$worst" 'BEGIN {print (w != "nan" && w + 0 <= 1e-4) ? "ok" : "FAIL"}')
  note "$vs_cpu_name" "max relative loss difference $worst over $train_steps steps (<= 1e-4)" "$v"
}

# ---- 5. communicators, one rank -----------------------------------------------------------------
check_comm() {
  local comm engine rc=0 p f s tp=0 tf=0 ts=0 v comm_filter engine_filter none=""
  comm=$(find_test zt_mpi_device_comm_tests)
  engine=$(find_test zt_mpi_device_engine_tests)
  if [ -z "$comm" ] || [ -z "$engine" ]; then
    note "$comm_name" "no zt_mpi_device_comm_tests / zt_mpi_device_engine_tests binary" FAIL
    return
  fi
  if [ $dry -eq 1 ]; then
    comm_filter='HostStagingCommunicator.*:CommunicatorFactory.*:-*OnAGpu'
    engine_filter='ScrambledDevice.*:DeviceEngine.SelfCommunicator*'
  else
    # WatchdogAbortsWhenARankDoesNotCall needs two ranks (skips at one), and two ranks cannot
    # share this one GPU under NCCL: filtered out, so that any skip left is a failure.
    comm_filter='NcclCommunicator.*:*OnAGpu:-NcclCommunicator.WatchdogAbortsWhenARankDoesNotCall'
    engine_filter='NcclCommunicator.*'
  fi
  tmo mpirun -np 1 "$comm" --gtest_filter="$comm_filter" > "$out/comm.txt" 2>&1 || rc=$?
  read -r p f s < <(gtest_counts "$out/comm.txt")
  tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
  [ "$p" -gt 0 ] || none="; none passed in comm.txt"
  tmo mpirun -np 1 "$engine" --gtest_filter="$engine_filter" > "$out/comm_engine.txt" 2>&1 || rc=$?
  read -r p f s < <(gtest_counts "$out/comm_engine.txt")
  tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
  [ "$p" -gt 0 ] || none="$none; none passed in comm_engine.txt"
  if [ "$rc" -eq 0 ] && [ -z "$none" ] && [ "$tf" -eq 0 ] && [ "$ts" -eq 0 ]; then v=ok; else v=FAIL; fi
  note "$comm_name" "$tp passed, $tf failed, $ts skipped, $(why "$rc")$none" $v
  grep -h '^\[  FAILED  \] [A-Za-z]' "$out/comm.txt" "$out/comm_engine.txt" | sort -u | head -n 20
}

# ---- 6. PyTorch on the same GPU ------------------------------------------------------------------
check_torch() {
  local rc ttps tps v
  if [ $dry -eq 1 ]; then
    note "$torch_name" "dry run: PyTorch's reference needs a GPU" skipped
    return
  fi
  if ! py -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible to torch'" > "$out/torch_import.txt" 2>&1; then
    note "$torch_name" "import torch failed: $(tail -n 1 "$out/torch_import.txt")" skipped
    return
  fi
  tmo env "${py_env[@]}" python3 tests/gpu/torch_gpt2_bench.py --batch "$B" --seq-len "$T" > "$out/torch.txt" 2>&1
  rc=$?
  ttps=$(grep -o 'tokens_per_s [0-9.]*' "$out/torch.txt" | awk '{print $2}')
  if [ $rc -ne 0 ] || [ -z "$ttps" ]; then
    note "$torch_name" "failed, $(why $rc): $(what_failed "$out/torch.txt")" FAIL
    return
  fi
  tps=$( [ -s "$out/plain.json" ] && bench_field "$out/plain.json" tokens_per_s || echo 0)
  v=$(py -c "print('ok' if $tps >= $ttps else 'below-target')")
  note "$torch_name" "$(printf '%.0f tokens/s; ours %.0f (x%s)' "$ttps" "$tps" "$(py -c "print('%.2f' % ($tps / $ttps))")")" "$v"
}

if [ $dry -eq 1 ]; then
  parity_name="kernel parity (CPU kernel tests)"
  train_name="$model bf16 B=$B T=$T (cpu)"
  ckpt_name="+ activation checkpointing"
  ranks_name="2 ranks, cpu: stage 3 = stage 0"
  vs_cpu_name="cpu vs CPU back end, fp32 losses"
  comm_name="host staging + scrambled device, 1 rank"
else
  parity_name="kernel parity (CUDA vs CPU)"
  train_name="$model bf16 B=$B T=$T"
  ckpt_name="+ activation checkpointing"
  ranks_name="2 ranks on 1 GPU: stage 3 = stage 0"
  vs_cpu_name="GPU vs CPU back end, fp32 losses"
  comm_name="NCCL (and host staging), 1 rank"
fi
torch_name="PyTorch $model bf16 (SDPA, autocast)"

run_check 90 "$parity_name" check_parity
run_check 90 "$train_name" check_training
run_check 90 "$ckpt_name" check_checkpointing
run_check 150 "$ranks_name" check_two_ranks
run_check 90 "$comm_name" check_comm
run_check 120 "$torch_name" check_torch

write_summary
exit $failed
