#!/usr/bin/env bash
# The GPU checks of the CUDA back end, made for one prepared run on a GPU machine that may have
# no packages and brings back at most 8 files from $OUT (this script writes 5, below). Every
# check runs under its own time limit inside one budget, most informative first; the summary is
# rewritten after every check, so a run killed at any point leaves the checks it finished. The
# checks, in order (--only NAME,... reruns some; the preflight always runs):
#   smoke     GPT-2 124M bf16, one step at B=1 T=128 (zt-bench train): does anything run at all
#   training  GPT-2 124M bf16 at BATCH x SEQ_LEN with --profile: tokens/s, MFU against the dense
#             bf16 peak (below-target under ZT_MFU_TARGET, default 40%), losses finite and
#             falling, the per-op table (CUDA events); the memory planner's activation peak
#             for that step (cuDNN's attention record included) equal to the tracker's
#   torch     PyTorch eager on the same model and batch (bf16 autocast, fused SDPA): its tokens/s
#             beside ours (below-target when ours is lower); skipped when `import torch` fails
#   attention the training run again with the materialised T×T attention
#             (ZT_CUDA_ATTENTION=reference): its step time beside the training check's, whose
#             attention path (cuDNN's fused SDPA, or the reference and why) the training row
#             names; the two runs' losses over the first 3 steps within 1% of each other
#   parity    every Kernels op on CUDA against the CPU back end (zt_runtime_tests Cuda* and
#             */Cuda*): the exit code and the counts, no test skipped
#   ranks     2 ranks on the one GPU (MPI with host staging), fp32 zt-train: stage 3's losses
#             bitwise equal to stage 0's, finite and falling; and the GPU's losses against the
#             CPU back end's over the first 3 steps (before Adam amplifies summation-order
#             differences; <= 1e-4 relative), the whole run's largest difference reported beside
#   comm      NCCL with one rank (zt_mpi_device_comm_tests, zt_mpi_device_engine_tests
#             NcclCommunicator.*; the watchdog test that needs two ranks filtered out), and a
#             LoRA run on the GPU against the CPU (DeviceEngine.LoraOnTheGpuTracksTheCpu)
#   ckpt      activation checkpointing: activation peak below the plain run's, losses bitwise
#             equal to it, the step-time ratio
# --dry-run runs the same script on the CPU back end with tiny shapes and no GPU (gpt2-tiny, the
# CPU kernel tests for parity, host staging and the scrambled device for comm, no PyTorch), so
# that its plumbing is tested in CI: ctest -R e2e.device_check_dry_run.
#
# Preflight (each problem one line; exit 2): nvidia-smi and a GPU, a driver whose CUDA version is
# at least the major version of the runtime we were built with, every shared library of our
# binaries resolved by ldd (the report is ldd.txt), python3. `mpirun -np 2 true` failing is no
# preflight failure: the multi-rank checks (ranks) are recorded as skipped naming why, and comm
# runs its one rank without mpirun. Open MPI is told it is on one machine (OMPI_MCA_plm=isolated:
# no ssh or rsh needed) without InfiniBand (ob1 over self,vader; no UCX).
#
# Time: ZT_CHECK_BUDGET_S (default 360) from the script's start; each check runs under
# min(its own limit, what is left), the limits and the preflight's sum below the budget; once the
# budget is spent each remaining check is recorded as skipped with the reason.
#
# Output ($OUT when set, else build/device-check-<UTC time>), never more than 5 files:
#   summary.json  {mode, gpu, driver, elapsed_s, checks: [{name, value, verdict, seconds}]}
#   summary.txt   the same as a table
#   logs.tar.gz   every log and run folder (files under 8 MiB), from the scratch directory
#   ldd.txt       how each binary's shared libraries resolved
#   profile.txt   the training check's zt-bench output with its per-op table
# Logs and run folders are written to a scratch directory (ZT_CHECK_LOGS, default a new
# directory under /tmp when $OUT is set, else DIR/logs), kept, and packed after every check.
#
# A GPU machine may have no package access: build here, run scripts/bundle_device.sh, carry
# build/device-bundle.tar.xz and data/corpus with the working tree (this script sources its
# helpers, tests/gpu/device_check_lib.sh and device_check_summary.sh, from beside it); it unpacks the bundle, points
# PATH, LD_LIBRARY_PATH and OPAL_PREFIX at it and finds the CUDA runtime, cuBLAS, cuDNN and NCCL
# on the machine (the toolkit, or Python's nvidia-* wheels). Without a bundle it uses build/ and the
# system. Python (torch, the JSON helpers) runs with the LD_LIBRARY_PATH this script was started
# with, so the bundle's libraries cannot break torch.
#
# Usage: [OUT=DIR] tests/gpu/device_check.sh [--dry-run] [--only NAME,...] [BATCH] [SEQ_LEN]
#   (defaults: 16 1024; dry run 2 32). Exit 0 when no check FAILed (ok, skipped and
#   below-target rows pass), 1 when one did, 2 when the preflight or the arguments failed.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
# The self-contained helpers (JSON strings, exit codes, failure lines, our JSON and logs) and the
# summary's writers, beside this script.
for f in device_check_lib.sh device_check_summary.sh; do
  source "$root/tests/gpu/$f" || { echo "device_check: cannot read $root/tests/gpu/$f" >&2; exit 2; }
done
cd "$root"

all_checks="smoke training torch attention parity ranks comm ckpt"
dry=0 only=""
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --only) only=${2:-}; shift ;;
    --only=*) only=${1#--only=} ;;
    -h | --help) sed -n '2,/^set -u$/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "device_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) args+=("$1") ;;
  esac
  shift
done
if [ -n "$only" ]; then
  for c in ${only//,/ }; do
    [[ " $all_checks " == *" $c "* ]] || { echo "device_check: --only: unknown check '$c' (one of: $all_checks)" >&2; exit 2; }
  done
fi
selected() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
if [ $dry -eq 1 ]; then
  B=${args[0]:-2} T=${args[1]:-32}
else
  B=${args[0]:-16} T=${args[1]:-1024}
fi
budget=${ZT_CHECK_BUDGET_S:-360}
for n in "$B" "$T" "$budget"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "device_check: BATCH, SEQ_LEN and ZT_CHECK_BUDGET_S must be whole numbers; got '$n'" >&2; exit 2; }
done
build=${ZT_BUILD_DIR:-$root/build}
t0=$SECONDS

# ---- where everything goes: $OUT gets the summaries, the logs' archive and two reports ----------
if [ -n "${OUT:-}" ]; then
  out=$OUT
  logs=${ZT_CHECK_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/zt-device-check.XXXXXX")}
else
  out=$build/device-check-$(date -u +%Y%m%dT%H%M%SZ)
  logs=${ZT_CHECK_LOGS:-$out/logs}
fi
mkdir -p "$out" "$logs" || { echo "device_check: cannot create $out or $logs" >&2; exit 2; }
out=$(cd "$out" && pwd) logs=$(cd "$logs" && pwd)
echo "device_check: summary, logs.tar.gz, ldd.txt and profile.txt in $out; logs in $logs (kept)"

# Python without the bundle's libraries: the LD_LIBRARY_PATH we were started with, or none.
if [ -n "${LD_LIBRARY_PATH+set}" ]; then
  py_env=("LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
else
  py_env=(-u LD_LIBRARY_PATH)
fi
py() { env "${py_env[@]}" python3 "$@"; }

# ---- results: the summary is rewritten at every row, the logs packed after every check ----------
names=() values=() verdicts=() secs=()
failed=0
check_t0=$SECONDS
note() {  # name value verdict (ok, FAIL, skipped, below-target)
  names+=("$1") values+=("$2") verdicts+=("$3") secs+=("$((SECONDS - check_t0))")
  [ "$3" = FAIL ] && failed=1
  echo "== $1: $2 [$3]"
  write_summary > /dev/null
}
gpu="none" driver="none" driver_cuda="none"
# write_summary and pack_logs: tests/gpu/device_check_summary.sh

# ---- the deadline --------------------------------------------------------------------------------
# Each check's own limit in seconds, most informative first. With the preflight's mpirun probe
# (20 s) they sum to 355 s, below the default budget; summary.json records them and the e2e dry
# run asserts the sum stays below the budget.
declare -A limit=([smoke]=30 [training]=60 [torch]=50 [attention]=40 [parity]=45 [ranks]=55 [comm]=25
  [ckpt]=30)
preflight_limit=20
check_end=0
# run_check KEY NAME FUNCTION: FUNCTION under min(its limit, what is left of the budget), unless
# --only leaves KEY out; once the budget is spent, NAME is recorded as skipped instead.
run_check() {
  local key=$1 name=$2 fn=$3 left own=${limit[$1]}
  selected "$key" || return
  left=$((budget - (SECONDS - t0)))
  check_t0=$SECONDS
  if [ "$left" -le 0 ]; then
    note "$name" "not run: the ${budget} s budget (ZT_CHECK_BUDGET_S) was spent" skipped
    return
  fi
  check_end=$((SECONDS + (own < left ? own : left)))
  "$fn"
  pack_logs
}
# tmo COMMAND...: COMMAND under what is left of the current check's limit (exit 124 when it ran
# out, without running it when nothing is left).
tmo() {
  local left=$((check_end - SECONDS))
  [ "$left" -gt 0 ] || return 124
  timeout -k 10 "$left" "$@"
}

# ---- environment: bundle, libraries, Open MPI ---------------------------------------------------
bundle=$build/device-bundle
unpack_error=""
if [ -f "$build/device-bundle.tar.xz" ] && [ ! -d "$bundle" ] && [ $dry -eq 0 ]; then
  if ! tar -C "$build" -xJf "$build/device-bundle.tar.xz" > "$logs/unpack.txt" 2>&1; then
    unpack_error="cannot unpack $build/device-bundle.tar.xz: $(tail -n 1 "$logs/unpack.txt")"
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
  # The CUDA runtime, cuBLAS, cuDNN and NCCL of the major version we were built with, from the
  # machine: the toolkit, else pip's wheels (nvidia/*/lib), else anywhere under /usr/local, /opt.
  search=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
          /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu)
  if command -v python3 > /dev/null; then
    while read -r d; do search+=("$d"); done < <(py - << 'PY' 2> /dev/null
import glob, site, os, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p]
for s in dict.fromkeys(dirs):
    for d in glob.glob(os.path.join(s, "nvidia", "*", "lib")):
        print(d)
PY
    )
  fi
  machine_libs=()
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    found=""
    for d in "${search[@]}"; do
      [ -e "$d/$lib" ] && { found=$d; break; }
    done
    [ -n "$found" ] || found=$(find /usr/local /opt -maxdepth 8 -name "$lib" 2> /dev/null | head -n 1 | xargs -r dirname)
    machine_libs+=("$lib => ${found:-not found}")
    if [ -n "$found" ]; then
      case ":${LD_LIBRARY_PATH:-}:" in
        *":$found:"*) ;;
        *) export LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
      esac
    fi
  done
fi
# Open MPI on one machine without InfiniBand: no remote launcher (plm isolated: no ssh or rsh),
# ob1 over self and shared memory, no UCX (its transports probe for hardware that is not there
# and can hang or abort), no single-copy mechanism (CMA is often blocked in containers), as root,
# more ranks than slots allowed.
export OMPI_MCA_plm=isolated
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_MCA_coll_hcoll_enable=0
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
export GTEST_COLOR=no  # mpirun gives ranks a terminal: plain lines for the counts below

# ---- preflight -----------------------------------------------------------------------------------
problems=()
[ -z "$unpack_error" ] || problems+=("$unpack_error")
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
binaries=()
for b in "$bin/zt-train" "$bin/zt-bench"; do
  if [ -x "$b" ]; then binaries+=("$b"); else problems+=("no $b: build it (or carry the bundle)"); fi
done
for t in zt_runtime_tests zt_mpi_device_comm_tests zt_mpi_device_engine_tests; do
  f=$(find_test "$t")
  [ -n "$f" ] && binaries+=("$f")
done
{
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  if [ $dry -eq 0 ]; then
    echo "== found on this machine (directory)"
    printf '%s\n' "${machine_libs[@]}"
    # cuDNN's version, for the attention path that will use it (cudnnGetVersion: 91900 = 9.19.0)
    cudnn_dir=$(printf '%s\n' "${machine_libs[@]}" | sed -n 's/^libcudnn.so.9 => \(\/.*\)$/\1/p')
    [ -z "$cudnn_dir" ] || echo "cudnnGetVersion: $(py -c "import ctypes; print(ctypes.CDLL('$cudnn_dir/libcudnn.so.9').cudnnGetVersion())" 2>&1 | tail -n 1)"
  fi
  for b in "${binaries[@]}"; do echo "== $b"; ldd "$b" 2>&1; done
} > "$out/ldd.txt"
for b in "${binaries[@]}"; do
  while read -r lib; do
    problems+=("$(basename "$b"): $lib not found by ldd (ldd.txt)")
  done < <(ldd "$b" 2> /dev/null | awk '/not found/ {print $1}')
done
# mpirun: a failure here skips the multi-rank check, naming why; it fails nothing else.
mpi_problem=""
if ! command -v mpirun > /dev/null; then
  mpi_problem="mpirun is not on PATH (carry the bundle: scripts/bundle_device.sh)"
elif ! timeout "$preflight_limit" mpirun -np 2 true > "$logs/mpirun_true.txt" 2>&1; then
  mpi_problem="mpirun -np 2 true failed: $(grep -v '^ *$\|^-----' "$logs/mpirun_true.txt" | head -n 3 | tr '\n' ' ')(mpirun_true.txt)"
fi
[ -z "$mpi_problem" ] || echo "device_check: $mpi_problem; the multi-rank checks will be skipped" >&2
echo "device_check: $([ $dry -eq 1 ] && echo 'dry run on the CPU back end' || echo "$gpu, driver $driver (CUDA $driver_cuda)"); binaries from $bin; B=$B T=$T; budget $budget s"
if [ "${#problems[@]}" -gt 0 ]; then
  check_t0=$SECONDS
  for p in "${problems[@]}"; do
    echo "device_check: preflight: $p" >&2
    note preflight "$p" FAIL > /dev/null
  done
  write_summary
  pack_logs
  exit 2
fi
check_t0=$SECONDS
note preflight "$(if [ $dry -eq 1 ]; then echo "dry run: binaries from $bin"; else echo "$gpu, driver $driver (CUDA $driver_cuda); libraries resolved (ldd.txt)"; fi)$([ -n "$mpi_problem" ] && echo "; $mpi_problem")" ok > /dev/null

if [ $dry -eq 1 ]; then
  device=cpu model=gpt2-tiny steps=3 warmup=1 train_steps=6 mfu_target=${ZT_MFU_TARGET:-0}
  smoke_shape=(-B 1 -T 16)
  # Tiny shapes gain nothing from more threads, and a busy CI machine's cores are shared.
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  # The checks compare runs bit for bit (checkpointed vs plain): the CPU's 16-bit GEMM paths are
  # pinned to the feature-flag rule, not measured, so that a measurement under load (or another
  # job rewriting the shared path cache between the runs) cannot give the two runs other paths.
  export ZT_CPU_GEMM=${ZT_CPU_GEMM:-flags}
  train_shape=(--set train_micro_batch_size_per_gpu=2 --set zt.seq_len=32)
else
  device=cuda model=gpt2-124M steps=10 warmup=3 train_steps=20 mfu_target=${ZT_MFU_TARGET:-0.40}
  smoke_shape=(-B 1 -T 128)
  train_shape=()
fi

# ---- smoke: one step ------------------------------------------------------------------------------
check_smoke() {
  local rc loss
  tmo "$bin/zt-bench" train --device "$device" --model "$model" "${smoke_shape[@]}" \
    --precision bf16 --steps 1 --warmup 0 --json "$logs/smoke.json" > "$logs/smoke.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$logs/smoke.json" ]; then
    note "$smoke_name" "zt-bench failed, $(why $rc): $(what_failed "$logs/smoke.txt")" FAIL
    return
  fi
  loss=$(bench_losses "$logs/smoke.json" | head -n 1)
  if py -c "import math, sys; sys.exit(not math.isfinite(float('$loss')))"; then
    note "$smoke_name" "$(printf 'one step, loss %.4f, %.1f ms' "$loss" "$(bench_field "$logs/smoke.json" ms_per_step)")" ok
  else
    note "$smoke_name" "one step, loss $loss is not finite" FAIL
  fi
}

# ---- training: tokens/s, losses, MFU, per-op profile; with checkpointing ---------------------------
bench() {  # name, extra args
  local name=$1
  shift
  tmo "$bin/zt-bench" train --device "$device" --model "$model" -B "$B" -T "$T" \
    --precision bf16 --steps "$steps" --warmup "$warmup" --json "$logs/$name.json" "$@" \
    > "$logs/$name.txt" 2>&1
}
check_training() {
  local rc tps mfu verdict fall
  bench plain --profile
  rc=$?
  cp -f "$logs/plain.txt" "$out/profile.txt" 2> /dev/null
  if [ $rc -ne 0 ] || [ ! -s "$logs/plain.json" ]; then
    note "$train_name" "zt-bench failed, $(why $rc): $(what_failed "$logs/plain.txt")" FAIL
    note "MFU (target $(py -c "print('%g%%' % (100 * $mfu_target))"))" "no measurement" skipped
    return
  fi
  tps=$(bench_field "$logs/plain.json" tokens_per_s)
  fall=$(bench_losses "$logs/plain.json" | falling)
  [ "$fall" = ok ] && verdict=ok || verdict=FAIL
  note "$train_name" "$(printf '%.0f tokens/s, %s ms/step; losses %s -> %s: %s; attention: %s' "$tps" \
    "$(bench_field "$logs/plain.json" ms_per_step | cut -c1-7)" \
    "$(bench_losses "$logs/plain.json" | head -n 1 | cut -c1-7)" \
    "$(bench_losses "$logs/plain.json" | tail -n 1 | cut -c1-7)" "$fall" \
    "$(attention_path "$logs/plain.txt" "$no_path_line")")" $verdict
  # The memory planner's activation peak for this step (what zt-estimate counts, cuDNN's
  # attention record included) against the tracker's: equal bytes, or the planner is wrong.
  local planned measured
  planned=$(bench_field "$logs/plain.json" planned_activation_bytes)
  measured=$(bench_field "$logs/plain.json" peak_activation_bytes)
  [ "$planned" = "$measured" ] && verdict=ok || verdict=FAIL
  note "$plan_name" "$(py -c "print('planned %d bytes, measured %d (%.1f MiB)' % ($planned, $measured, $measured / 2**20))")" "$verdict"
  mfu=$(bench_field "$logs/plain.json" mfu)
  verdict=$(py -c "print('ok' if $mfu >= $mfu_target else 'below-target')")
  note "MFU (target $(py -c "print('%g%%' % (100 * $mfu_target))"))" "$(py -c "print('%.1f%%' % (100 * $mfu))")$([ $dry -eq 1 ] && echo ' of the CPU fp32 peak (dry run stand-in)' || echo ' of the dense bf16 peak')" "$verdict"
}
check_attention() {
  local rc ratio diff v
  if [ ! -s "$logs/plain.json" ]; then
    note "$attn_name" "no training run to compare with (the training check did not finish)" FAIL
    return
  fi
  ZT_CUDA_ATTENTION=reference bench reference
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$logs/reference.json" ]; then
    note "$attn_name" "zt-bench failed, $(why $rc): $(what_failed "$logs/reference.txt")" FAIL
    return
  fi
  ratio=$(py -c "print('%.2f' % ($(bench_field "$logs/reference.json" ms_per_step) / $(bench_field "$logs/plain.json" ms_per_step)))")
  bench_losses "$logs/plain.json" > "$logs/plain.losses"
  bench_losses "$logs/reference.json" > "$logs/reference.losses"
  diff=$(max_rel_diff "$logs/plain.losses" "$logs/reference.losses" 3)
  py -c "import sys; sys.exit(not float('$diff') <= 1e-2)" && v=ok || v=FAIL
  note "$attn_name" "$(printf '%s ms/step, x%s the training run'"'"'s (%s); first 3 losses within %s (<= 1e-2 asked)' \
    "$(bench_field "$logs/reference.json" ms_per_step | cut -c1-7)" "$ratio" \
    "$(attention_path "$logs/plain.txt" "$no_path_line")" "$diff")" $v
}
check_checkpointing() {
  local rc ratio act same v
  if [ ! -s "$logs/plain.json" ]; then
    note "$ckpt_name" "no plain run to compare with (the training check did not finish)" FAIL
    return
  fi
  bench ckpt --profile --checkpoint
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$logs/ckpt.json" ]; then
    note "$ckpt_name" "zt-bench --checkpoint failed, $(why $rc): $(what_failed "$logs/ckpt.txt")" FAIL
    return
  fi
  ratio=$(py -c "print('%.2f' % ($(bench_field "$logs/ckpt.json" ms_per_step) / $(bench_field "$logs/plain.json" ms_per_step)))")
  act=$(py -c "print('%.3f' % ($(bench_field "$logs/ckpt.json" peak_activation_bytes) / max(1, $(bench_field "$logs/plain.json" peak_activation_bytes))))")
  if [ "$(bench_losses "$logs/ckpt.json")" = "$(bench_losses "$logs/plain.json")" ]; then
    same="losses bitwise equal"
  else
    same="losses DIFFER from the plain run's"
  fi
  if [ "$same" = "losses bitwise equal" ] && py -c "import sys; sys.exit(not $act < 1)"; then v=ok; else v=FAIL; fi
  note "$ckpt_name" "step time x$ratio, activation peak x$act (< 1 needed), $same" $v
}

# ---- two ranks, stage 3 vs stage 0 vs the CPU back end ------------------------------------------
train() {  # name, extra --set args
  local name=$1
  shift
  rm -rf "${logs:?}/$name"
  tmo mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$logs/$name" --set zt.steps="$train_steps" --set zt.eval_every=0 \
    --set zt.val_data='""' --set steps_per_print=100 \
    --set scheduler.params.warmup_num_steps=2 --set scheduler.params.total_num_steps="$train_steps" \
    "${train_shape[@]}" "$@" > "$logs/$name.txt" 2>&1
}
check_two_ranks() {
  local rc1 rc2 rc3 n fall v first all
  if [ -n "$mpi_problem" ]; then
    note "$ranks_name" "not run: $mpi_problem" skipped
    note "$vs_cpu_name" "not run: $mpi_problem" skipped
    return
  fi
  if [ ! -f data/corpus/train.bin ]; then
    note "$ranks_name" "data/corpus missing: carry it (scripts/fetch_data.sh here)" FAIL
    note "$vs_cpu_name" "data/corpus missing" FAIL
    return
  fi
  local dev=(--set zt.device="$device" --set zt.comm_backend=mpi)
  train dev_s0 "${dev[@]}" --set zero_optimization.stage=0; rc1=$?
  train dev_s3 "${dev[@]}" --set zero_optimization.stage=3; rc2=$?
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
    note "$ranks_name" "zt-train failed: stage 0 $(why $rc1), stage 3 $(why $rc2): $(what_failed "$logs/dev_s0.txt" "$logs/dev_s3.txt")" FAIL
  else
    n=$(metrics_losses "$logs/dev_s3" | wc -l)
    fall=$(metrics_losses "$logs/dev_s3" | falling)
    if [ "$n" -eq "$train_steps" ] && [ "$(metrics_losses "$logs/dev_s0")" = "$(metrics_losses "$logs/dev_s3")" ] && [ "$fall" = ok ]; then
      v=ok
    else
      v=FAIL
    fi
    note "$ranks_name" "$n of $train_steps losses, stage 3 $([ "$(metrics_losses "$logs/dev_s0")" = "$(metrics_losses "$logs/dev_s3")" ] && echo '=' || echo '!=') stage 0 bitwise; falling: $fall" $v
  fi
  train cpu_s0 --set zt.device=cpu --set zero_optimization.stage=0; rc3=$?
  if [ $rc1 -ne 0 ] || [ $rc3 -ne 0 ]; then
    note "$vs_cpu_name" "zt-train failed: $device $(why $rc1), cpu $(why $rc3): $(what_failed "$logs/dev_s0.txt" "$logs/cpu_s0.txt")" FAIL
    return
  fi
  metrics_losses "$logs/dev_s0" > "$logs/dev_s0.losses"
  metrics_losses "$logs/cpu_s0" > "$logs/cpu_s0.losses"
  first=$(max_rel_diff "$logs/dev_s0.losses" "$logs/cpu_s0.losses" 3)
  all=$(max_rel_diff "$logs/dev_s0.losses" "$logs/cpu_s0.losses")
  v=$(awk -v w="$first" 'BEGIN {print (w != "nan" && w + 0 <= 1e-4) ? "ok" : "FAIL"}')
  note "$vs_cpu_name" "max relative loss difference $first over the first 3 steps (<= 1e-4); $all over all $train_steps" "$v"
}

# ---- communicators, one rank -----------------------------------------------------------------------
check_comm() {
  local comm engine rc=0 p f s tp=0 tf=0 ts=0 v comm_filter engine_filter none="" launch=()
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
    engine_filter='NcclCommunicator.*:DeviceEngine.LoraOnTheGpuTracksTheCpu'
  fi
  # One rank runs as a singleton without mpirun when mpirun cannot launch.
  [ -n "$mpi_problem" ] || launch=(mpirun -np 1)
  tmo "${launch[@]}" "$comm" --gtest_filter="$comm_filter" > "$logs/comm.txt" 2>&1 || rc=$?
  read -r p f s < <(gtest_counts "$logs/comm.txt")
  tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
  [ "$p" -gt 0 ] || none="; none passed in comm.txt"
  tmo "${launch[@]}" "$engine" --gtest_filter="$engine_filter" > "$logs/comm_engine.txt" 2>&1 || rc=$?
  read -r p f s < <(gtest_counts "$logs/comm_engine.txt")
  tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
  [ "$p" -gt 0 ] || none="$none; none passed in comm_engine.txt"
  if [ "$rc" -eq 0 ] && [ -z "$none" ] && [ "$tf" -eq 0 ] && [ "$ts" -eq 0 ]; then v=ok; else v=FAIL; fi
  note "$comm_name" "$tp passed, $tf failed, $ts skipped, $(why "$rc")$none$([ -n "$mpi_problem" ] && echo ' (singleton, no mpirun)')" $v
  grep -h '^\[  FAILED  \] [A-Za-z]' "$logs/comm.txt" "$logs/comm_engine.txt" | sort -u | head -n 20
}

# ---- kernel parity ---------------------------------------------------------------------------------
check_parity() {
  local rt filter rc p f s v
  rt=$(find_test zt_runtime_tests)
  [ -n "$rt" ] || { note "$parity_name" "no zt_runtime_tests binary" FAIL; return; }
  if [ $dry -eq 1 ]; then
    filter='KernelsTest.*'
  else
    # CudaFactory.MakeDeviceWithoutGpu* checks the error without a GPU and skips whenever one is
    # visible: excluded, so that any skip left is a failure. */Cuda*: the parameterised suites
    # (Dtypes/CudaActivationStorageTest).
    filter='Cuda*:*/Cuda*:-CudaFactory.MakeDeviceWithoutGpu*'
  fi
  tmo "$rt" --gtest_filter="$filter" > "$logs/parity.txt" 2>&1
  rc=$?
  read -r p f s < <(gtest_counts "$logs/parity.txt")
  if [ $rc -eq 0 ] && [ "$p" -gt 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then v=ok; else v=FAIL; fi
  note "$parity_name" "$p passed, $f failed, $s skipped, $(why $rc) ($filter)" $v
  grep '^\[  FAILED  \] [A-Za-z]' "$logs/parity.txt" | sort -u | head -n 20
}

# ---- PyTorch on the same GPU -----------------------------------------------------------------------
check_torch() {
  local rc ttps tps v
  if [ $dry -eq 1 ]; then
    note "$torch_name" "dry run: PyTorch's reference needs a GPU" skipped
    return
  fi
  if ! tmo env "${py_env[@]}" python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible to torch'" > "$logs/torch_import.txt" 2>&1; then
    note "$torch_name" "import torch failed: $(tail -n 1 "$logs/torch_import.txt")" skipped
    return
  fi
  tmo env "${py_env[@]}" PYTHONUNBUFFERED=1 python3 tests/gpu/torch_gpt2_bench.py --batch "$B" --seq-len "$T" > "$logs/torch.txt" 2>&1
  rc=$?
  ttps=$(grep -o 'tokens_per_s [0-9.]*' "$logs/torch.txt" | awk '{print $2}')
  if [ $rc -ne 0 ] || [ -z "$ttps" ]; then
    note "$torch_name" "failed, $(why $rc): $(what_failed "$logs/torch.txt")" FAIL
    return
  fi
  if [ ! -s "$logs/plain.json" ]; then
    note "$torch_name" "$(printf '%.0f tokens/s; ours not measured in this run' "$ttps")" ok
    return
  fi
  tps=$(bench_field "$logs/plain.json" tokens_per_s)
  v=$(py -c "print('ok' if $tps >= $ttps else 'below-target')")
  note "$torch_name" "$(printf '%.0f tokens/s; ours %.0f (x%s)' "$ttps" "$tps" "$(py -c "print('%.2f' % ($tps / $ttps))")")" "$v"
}

if [ $dry -eq 1 ]; then
  smoke_name="smoke: $model bf16, one step (cpu)"
  train_name="$model bf16 B=$B T=$T (cpu)"
  parity_name="kernel parity (CPU kernel tests)"
  ranks_name="2 ranks, cpu: stage 3 = stage 0"
  vs_cpu_name="cpu vs CPU back end, fp32 losses"
  comm_name="host staging + scrambled device, 1 rank"
else
  smoke_name="smoke: $model bf16, one step"
  train_name="$model bf16 B=$B T=$T"
  parity_name="kernel parity (CUDA vs CPU)"
  ranks_name="2 ranks on 1 GPU: stage 3 = stage 0"
  vs_cpu_name="GPU vs CPU back end, fp32 losses"
  comm_name="NCCL (and host staging), 1 rank"
fi
ckpt_name="+ activation checkpointing"
plan_name="activation peak: planner vs tracker"
attn_name="materialised attention (ZT_CUDA_ATTENTION=reference)"
[ $dry -eq 1 ] && no_path_line="the CPU's kernels" || no_path_line="no path line (materialised kernels)"
torch_name="PyTorch $model bf16 (SDPA, autocast)"

run_check smoke "$smoke_name" check_smoke
run_check training "$train_name" check_training
run_check torch "$torch_name" check_torch
run_check attention "$attn_name" check_attention
run_check parity "$parity_name" check_parity
run_check ranks "$ranks_name" check_two_ranks
run_check comm "$comm_name" check_comm
run_check ckpt "$ckpt_name" check_checkpointing

write_summary
pack_logs
echo "outputs: $out (summary.json, summary.txt, logs.tar.gz, ldd.txt, profile.txt); logs in $logs"
exit $failed
