#!/usr/bin/env bash
# The GPU checks of the CUDA back end, on a machine with an NVIDIA GPU, in at most 6 minutes; ends
# with one summary table. What it runs:
#   1. kernel parity: every Kernels op on CUDA against the CPU back end (zt_runtime_tests Cuda*)
#   2. GPT-2 124M bf16 single-GPU training: tokens/s and MFU (zt-bench train --device cuda)
#   3. the same with activation checkpointing, and its activation peak-memory ratio
#   4. 2 ranks on the one GPU (MPI communicator with host staging), fp32: ZeRO stage 3 losses
#      bitwise equal to stage 0's, and within 1e-4 relative of the CPU back end's
#   5. NCCL with one rank (zt_mpi_device_comm_tests and zt_mpi_device_engine_tests
#      NcclCommunicator.*)
#   6. PyTorch on the same GPU, same model and batch (bf16 autocast, fused SDPA), tokens/s beside
#      ours (tests/gpu/torch_gpt2_bench.py), when torch is importable
# Such a machine may have no package access: build here, run scripts/bundle_device.sh, and carry
# build/device-bundle.tar.xz and data/corpus; this script unpacks the bundle, points
# LD_LIBRARY_PATH / OPAL_PREFIX at it, and finds cuBLAS and NCCL in the CUDA toolkit or in
# Python's site-packages (nvidia-* wheels). Without a bundle it uses build/ and the system.
# Usage: tests/gpu/device_check.sh [BATCH] [SEQ_LEN]   (defaults 16 1024); exit 1 if a check fails.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=${1:-16}
T=${2:-1024}
started=$(date +%s)
results=()   # "name|value|verdict"
failed=0
note() { results+=("$1|$2|$3"); [ "$3" = FAIL ] && failed=1; echo "== $1: $2 [$3]"; }
elapsed() { echo $(( $(date +%s) - started )); }

# ---- environment ----------------------------------------------------------------------------
bundle=build/device-bundle
if [ -f build/device-bundle.tar.xz ] && [ ! -d "$bundle" ]; then
  tar -C build -xJf build/device-bundle.tar.xz
fi
if [ -d "$bundle" ]; then
  bin=$bundle/bin
  tests=$bundle/bin
  export OPAL_PREFIX=$root/$bundle/openmpi
  export PATH=$root/$bundle/openmpi/bin:$PATH
  export LD_LIBRARY_PATH=$root/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  bin=build/bin
  tests=build/tests
fi
# cuBLAS and NCCL of the major version we were built with: the toolkit, else pip's nvidia wheels.
need_libs=(libcublas.so.13 libcublasLt.so.13 libnccl.so.2)
search=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64
        /usr/lib/x86_64-linux-gnu)
if command -v python3 > /dev/null; then
  while read -r d; do search+=("$d"); done < <(python3 - <<'PY' 2>/dev/null
import glob, site, os
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for d in glob.glob(os.path.join(s, "nvidia", "*", "lib")):
        print(d)
PY
)
fi
for lib in "${need_libs[@]}"; do
  found=""
  for d in "${search[@]}"; do
    [ -e "$d/$lib" ] && { found=$d; break; }
  done
  if [ -n "$found" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$found:"*) ;; *) export LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
  else
    echo "device_check: $lib not found in the CUDA toolkit or Python's site-packages" >&2
  fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$gpu" ] || { echo "device_check: no GPU (nvidia-smi found none)" >&2; exit 2; }
echo "device_check: $gpu; binaries from $bin"
out=$(mktemp -d)

# ---- 1. kernel parity ------------------------------------------------------------------------
timeout 120 "$tests/zt_runtime_tests" --gtest_filter='Cuda*' > "$out/parity.txt" 2>&1
passed=$(grep -c '^\[       OK \]' "$out/parity.txt")
failures=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$out/parity.txt")
skipped=$(grep -c '^\[  SKIPPED \]' "$out/parity.txt")
if [ "$passed" -gt 0 ] && [ "$failures" -eq 0 ] && [ "$skipped" -eq 0 ]; then v=ok; else v=FAIL; fi
note "kernel parity (CUDA vs CPU)" "$passed passed, $failures failed, $skipped skipped" $v
grep '^\[  FAILED  \] [A-Za-z]' "$out/parity.txt" | head -n 20

# ---- 2, 3. GPT-2 124M bf16 ------------------------------------------------------------------
bench() {  # name, extra args
  local name=$1
  shift
  timeout 150 "$bin/zt-bench" train --device cuda --model gpt2-124M -B "$B" -T "$T" \
    --precision bf16 --steps 10 --warmup 3 --json "$out/$name.json" "$@" > "$out/$name.txt" 2>&1
}
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(r[sys.argv[2]])" "$@"; }
if bench plain && bench ckpt --checkpoint; then
  tps=$(json "$out/plain.json" tokens_per_s)
  mfu=$(json "$out/plain.json" mfu)
  verdict=$(python3 -c "print('ok' if $mfu >= 0.45 else 'below 45%')")
  note "124M bf16 B=$B T=$T" "$(printf '%.0f tokens/s, MFU %.1f%%' "$tps" "$(python3 -c "print(100*$mfu)")")" "$verdict"
  ctps=$(json "$out/ckpt.json" tokens_per_s)
  ratio=$(python3 -c "print(round($(json "$out/ckpt.json" peak_activation_bytes)/$(json "$out/plain.json" peak_activation_bytes),3))")
  note "124M bf16 + checkpointing" "$(printf '%.0f tokens/s, activation peak ratio %s' "$ctps" "$ratio")" ok
else
  note "124M bf16 training" "zt-bench failed: $(tail -n 1 "$out/plain.txt" "$out/ckpt.txt" 2>/dev/null | tr '\n' ' ')" FAIL
fi

# ---- 4. two ranks on one GPU, stage 3 vs stage 0 vs the CPU back end ------------------------
train() {  # name, ranks, extra --set args
  local name=$1 ranks=$2
  shift 2
  timeout 120 mpirun --oversubscribe -np "$ranks" "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps=20 --set zt.eval_every=0 \
    --set zt.val_data='""' --set steps_per_print=100 "$@" > "$out/$name.txt" 2>&1
}
losses() { grep -o '"loss":[-0-9.eE+]*' "$out/$1/metrics.jsonl" | cut -d: -f2; }
if [ -f data/corpus/train.bin ]; then
  if train gpu_s0 2 --set zt.device=cuda --set zt.comm_backend=mpi --set zero_optimization.stage=0 &&
     train gpu_s3 2 --set zt.device=cuda --set zt.comm_backend=mpi --set zero_optimization.stage=3 &&
     train cpu_s0 2 --set zero_optimization.stage=0; then
    if [ "$(losses gpu_s0)" = "$(losses gpu_s3)" ]; then v=ok; else v=FAIL; fi
    note "2 ranks on 1 GPU: stage 3 = stage 0" "$(losses gpu_s3 | wc -l) losses compared bitwise" $v
    worst=$(paste <(losses gpu_s0) <(losses cpu_s0) |
            awk '{d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.2e", m}')
    v=$(awk -v w="$worst" 'BEGIN {print (w <= 1e-4) ? "ok" : "FAIL"}')
    note "GPU vs CPU back end, fp32 losses" "max relative difference $worst" "$v"
  else
    note "2 ranks on 1 GPU" "zt-train failed: $(tail -n 2 "$out"/gpu_s0.txt "$out"/gpu_s3.txt "$out"/cpu_s0.txt | tr '\n' ' ')" FAIL
  fi
else
  note "2 ranks on 1 GPU" "data/corpus missing: carry it (scripts/fetch_data.sh here)" FAIL
fi

# ---- 5. NCCL, one rank ----------------------------------------------------------------------
nccl_bin=$tests/zt_mpi_device_comm_tests
[ -x "$nccl_bin" ] || nccl_bin=$tests/mpi/zt_mpi_device_comm_tests
if [ -x "$nccl_bin" ]; then
  timeout 90 mpirun -np 1 "$nccl_bin" --gtest_filter='NcclCommunicator.*:*OnAGpu' > "$out/nccl.txt" 2>&1
  rc=$?
  # NCCL's host-memory all-gather (the loss and norm reductions) is in the device engine suite.
  engine_bin=$(dirname "$nccl_bin")/zt_mpi_device_engine_tests
  if [ -x "$engine_bin" ]; then
    timeout 60 mpirun -np 1 "$engine_bin" --gtest_filter='NcclCommunicator.*' >> "$out/nccl.txt" 2>&1 || rc=1
  fi
  np=$(grep -c '^\[       OK \]' "$out/nccl.txt")
  ns=$(grep -c '^\[  SKIPPED \]' "$out/nccl.txt")
  if [ $rc -eq 0 ] && [ "$np" -gt 0 ] && [ "$ns" -eq 0 ]; then v=ok; else v=FAIL; fi
  note "NCCL (and host staging), 1 rank" "$np passed, $ns skipped, exit $rc" $v
else
  note "NCCL, 1 rank" "no zt_mpi_device_comm_tests binary" FAIL
fi

# ---- 6. PyTorch on the same GPU -------------------------------------------------------------
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  if timeout 150 python3 tests/gpu/torch_gpt2_bench.py --batch "$B" --seq-len "$T" > "$out/torch.txt" 2>&1; then
    ttps=$(grep -o 'tokens_per_s [0-9.]*' "$out/torch.txt" | awk '{print $2}')
    verdict=$(python3 -c "print('ok' if ${tps:-0} >= ${ttps:-1e30} else 'slower')")
    note "PyTorch 124M bf16 (SDPA, autocast)" "$(printf '%.0f tokens/s; ours %.0f' "$ttps" "${tps:-0}")" "$verdict"
  else
    note "PyTorch 124M bf16" "failed: $(tail -n 1 "$out/torch.txt")" FAIL
  fi
else
  note "PyTorch 124M bf16" "torch with CUDA not importable here" skipped
fi

# ---- summary ----------------------------------------------------------------------------------
echo
echo "device_check on $gpu, $(elapsed) s"
printf '%-40s %-60s %s\n' check result verdict
for r in "${results[@]}"; do
  IFS='|' read -r name value verdict <<< "$r"
  printf '%-40s %-60s %s\n' "$name" "$value" "$verdict"
done
[ -n "${ZT_KEEP:-}" ] && echo "outputs kept in $out" || rm -rf "$out"
exit $failed
