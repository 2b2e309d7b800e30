#!/usr/bin/env bash
# zt.device_memory_limit makes the CPU back end stand in for a device of that size. Under
# mpirun -np 2, a GPT-2 of 6 blocks (Ψ = 1.26M parameters, fp32 Adam) whose peak per rank is
# 23,158,336 bytes at ZeRO stage 0 (model states 20.1 MB, allocated before the first step, plus
# 2 MiB of communicator staging and 0.9 MB of activations) and 18,436,416 at stage 3:
#   - a 64 MiB limit trains, every rank's peak within it;
#   - 20 MB stops every rank before the first step, exit 1, with one line naming the category
#     and bytes asked for, what each category holds and what would fit, and no abort;
#   - the same 20 MB trains at stage 3, as that line suggests;
#   - 20 MB on rank 1 only: both ranks stop, with rank 1's line;
#   - 22.5 MB holds the model states but not step 1's activations: the job ends in step 1;
#   - 64 KiB, too small for the communicator's staging: the same agreement, naming comm.
# overlap_comm off and no stage-3 prefetch or reuse keep the peaks the same run after run.
# Usage: memory_limit.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
source "$(dirname "$0")/lib/token_files.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tokens=()
for i in $(seq 0 599); do tokens+=($(( (i * 7 + i / 13) % 97 ))); done
write_tokens "$tmp/train.bin" 20240520 1 600 "${tokens[@]}"
cat > "$tmp/job.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 0, "overlap_comm": false, "stage3_prefetch_bucket_size": 1,
                        "stage3_max_reuse_distance": 0},
  "zt": {"model": {"n_layer": 6, "n_head": 2, "n_embd": 128, "vocab_size": 512, "n_positions": 16},
         "seq_len": 8, "steps": 2, "train_data": "$tmp/train.bin", "output_dir": "$tmp/out"}
}
JSON

failed=0
fail() { echo "FAIL: $*"; failed=1; }

# run NAME MPIRUN_ARGS...: the job under a 60 s timeout; sets rc, elapsed, ours (zt-train lines).
run() {
  local name=$1
  shift
  local start
  start=$(date +%s)
  timeout 60 mpirun --oversubscribe "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  ours=$(grep -c '^zt-train: ' "$tmp/$name.err")
}
job=("$bin/zt-train" --config "$tmp/job.json")

# A limit the job fits in: it trains, and no rank's peak passes the limit.
run fits -np 2 "${job[@]}" --set zt.device_memory_limit=64MiB
if [ "$rc" -ne 0 ]; then
  fail "the job does not train under a 64 MiB limit (exit $rc):"
  sed 's/^/    /' "$tmp/fits.err"
else
  grep -q 'device memory limit: 64.00 MiB (67,108,864 bytes) per rank' "$tmp/fits.out" ||
    fail "no start-up line naming the limit"
  # The step lines the failing runs below must not print.
  [ "$(grep -c '^step ' "$tmp/fits.out")" -eq 2 ] || fail "not 2 step lines in a run that trains"
  peak=$(grep -o '"peak_bytes_max":{[^}]*"total":[0-9.e+]*' "$tmp/out/metrics.jsonl" | grep -o '[0-9.e+]*$')
  awk -v p="$peak" 'BEGIN { exit !(p > 0 && p <= 67108864) }' ||
    fail "peak bytes '$peak' not within the 64 MiB limit"
  echo "64 MiB: trains, peak $peak bytes per rank"
fi

# Too small for the model states at stage 0: every rank stops before step 1, one line, exit 1.
run small -np 2 "${job[@]}" --set zt.device_memory_limit=20MB
echo "20 MB at stage 0: exit $rc after ${elapsed}s; stderr:"
sed 's/^/    /' "$tmp/small.err"
pattern='^zt-train: rank 0: out of device memory on cpu: (params|grads|optimizer) asked for [0-9.]+ [KM]iB \([0-9,]+ bytes\) but only [0-9.]+ [KM]iB \([0-9,]+ bytes\) of the 19\.07 MiB \(20,000,000 bytes\) zt\.device_memory_limit is free; in use: params [0-9.]+ MiB \([0-9,]+ bytes\), .*comm 2\.00 MiB \(2,097,152 bytes\); model states do not fit: shard more of them \(a higher zero_optimization\.stage: .*offload_optimizer.*, or raise zt\.device_memory_limit \(runtime/device\.cpp:[0-9]+\)$'
[ "$rc" -eq 1 ] || fail "exit code $rc, want 1"
[ "$elapsed" -le 30 ] || fail "took ${elapsed}s"
[ "$ours" -eq 1 ] || fail "$ours zt-train lines, want exactly 1"
grep -Eq "$pattern" "$tmp/small.err" || fail "the out-of-memory line is not the one expected"
grep -q '^step ' "$tmp/small.out" && fail "a step ran"
grep -q 'MPI_ABORT' "$tmp/small.err" && fail "the job was aborted rather than agreed on"

# What the line suggests fits: stage 3 under the same limit trains.
run stage3 -np 2 "${job[@]}" --set zt.device_memory_limit=20MB --set zero_optimization.stage=3
if [ "$rc" -ne 0 ]; then
  fail "stage 3 does not train under 20 MB (exit $rc):"
  sed 's/^/    /' "$tmp/stage3.err"
else
  echo "20 MB at stage 3: trains"
fi

# Too small on rank 1 only: both stop, rank 1's line, exit 1.
run one_rank -np 1 "${job[@]}" --set zt.device_memory_limit=64MiB \
  : -np 1 "${job[@]}" --set zt.device_memory_limit=20MB
if [ "$rc" -eq 1 ] && [ "$ours" -eq 1 ] &&
   grep -q '^zt-train: rank 1: out of device memory on cpu: ' "$tmp/one_rank.err"; then
  echo "20 MB on rank 1 only: $(grep '^zt-train: ' "$tmp/one_rank.err" | cut -c 1-60)..."
else
  fail "20 MB on rank 1 only: exit $rc, $ours zt-train lines:"
  sed 's/^/    /' "$tmp/one_rank.err"
fi

# Room for the model states, not for step 1's activations: the job ends in step 1 (the
# failing ranks' lines, the job aborted: activations are allocated inside the step).
run activations -np 2 "${job[@]}" --set zt.device_memory_limit=22.5MB
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$ours" -ge 1 ] &&
   grep -q '^zt-train: rank [01]: out of device memory on cpu: activations asked for .* activations do not fit' "$tmp/activations.err" &&
   ! grep -q '^step ' "$tmp/activations.out"; then
  echo "22.5 MB: ends in step 1 naming activations, exit $rc after ${elapsed}s"
else
  fail "22.5 MB: exit $rc, $ours zt-train lines:"
  sed 's/^/    /' "$tmp/activations.err"
fi

# Too small for the communicator's staging buffers, the first device memory of the job.
run tiny -np 2 "${job[@]}" --set zt.device_memory_limit=64KiB
if [ "$rc" -eq 1 ] && [ "$ours" -eq 1 ] &&
   grep -q '^zt-train: rank 0: out of device memory on cpu: comm asked for .* communication buffers do not fit' "$tmp/tiny.err"; then
  echo "64 KiB: $(grep '^zt-train: ' "$tmp/tiny.err" | cut -c 1-80)..."
else
  fail "64 KiB: exit $rc, $ours zt-train lines:"
  sed 's/^/    /' "$tmp/tiny.err"
fi

[ "$failed" -eq 0 ] && echo "every limit case behaved"
exit "$failed"
