#!/usr/bin/env bash
# An error on one rank at any point of training ends every rank within 15 s of the error, with a
# non-zero exit and the failing rank's message printed exactly once. The error is injected with
# zt-train's test-only ZT_TEST_FAULT (train/test_fault.h) at forward, backward (overlap_comm on,
# so that unit's reduction is still in flight), optimizer, evaluation and the weights save, on the
# last rank, under mpirun -np 2 and -np 4 (oversubscribed). The time is measured from the moment
# the failing rank's line appears, not from the start.
# Usage: fault_injection.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
source "$(dirname "$0")/lib/token_files.bash"
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
launcher=""
cleanup() {
  if [ -n "$launcher" ]; then
    for pid in $(pgrep -P "$launcher"); do kill -KILL "$pid" 2> /dev/null; done
    kill -KILL "$launcher" 2> /dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
now() { date +%s.%N; }

tokens=()
for i in $(seq 0 1999); do tokens+=($(( (i * 7 + i / 13) % 97 ))); done
write_tokens "$tmp/train.bin" 20240520 1 2000 "${tokens[@]}"
# ZeRO-3 with overlap: gathers are prefetched and reductions run behind the backward pass, so a
# failure finds collectives queued and in flight. Evaluation after every step; weights saved.
cat > "$tmp/job.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 3, "overlap_comm": true, "stage3_param_persistence_threshold": 0},
  "zt": {"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 100, "n_positions": 16},
         "seq_len": 8, "steps": 4, "eval_every": 1, "eval_batches": 2,
         "train_data": "$tmp/train.bin", "val_data": "$tmp/train.bin",
         "output_dir": "$tmp/out", "save_weights": "$tmp/out/weights.safetensors"}
}
JSON

# The job works without a fault.
mpirun --oversubscribe -np 2 "$bin/zt-train" --config "$tmp/job.json" > "$tmp/ok.log" 2>&1 ||
  { echo "FAIL: the job does not run without a fault:"; cat "$tmp/ok.log"; exit 1; }

failed=0
run_case() {  # run_case RANKS POINT STEP
  local np=$1 point=$2 step=$3 rank=$(($1 - 1))
  local name="np$np.$point"
  : > "$tmp/$name.err"
  ZT_TEST_FAULT="point=$point,rank=$rank,step=$step" \
    mpirun --oversubscribe -np "$np" "$bin/zt-train" --config "$tmp/job.json" \
    > "$tmp/$name.out" 2> "$tmp/$name.err" &
  launcher=$!
  local pattern="^zt-train: rank $rank: injected fault \\(ZT_TEST_FAULT\\) at $point of unit"
  local t_fault="" t_end
  for _ in $(seq 1 600); do  # at most 120 s for the fault to happen
    [ -z "$t_fault" ] && grep -Eq "$pattern" "$tmp/$name.err" && t_fault=$(now)
    kill -0 "$launcher" 2> /dev/null || break
    if [ -n "$t_fault" ] && awk -v a="$t_fault" -v b="$(now)" 'BEGIN { exit !(b - a > 30) }'; then
      break  # hung: judged below
    fi
    sleep 0.1
  done
  t_end=$(now)
  [ -z "$t_fault" ] && grep -Eq "$pattern" "$tmp/$name.err" && t_fault=$t_end
  local hung=0
  kill -0 "$launcher" 2> /dev/null && hung=1
  if [ "$hung" -eq 1 ]; then
    for pid in $(pgrep -P "$launcher"); do kill -KILL "$pid" 2> /dev/null; done
    kill -KILL "$launcher" 2> /dev/null
  fi
  wait "$launcher"
  local rc=$?
  launcher=""
  local count elapsed="?"
  count=$(grep -Ec "$pattern" "$tmp/$name.err")
  [ -n "$t_fault" ] && elapsed=$(awk -v a="$t_fault" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')
  local problems=""
  [ "$hung" -eq 0 ] || problems+=" still running 30 s after the error;"
  [ "$rc" -ne 0 ] || problems+=" exit code 0;"
  [ "$count" -eq 1 ] || problems+=" the failing rank's line appears $count times;"
  if [ -n "$t_fault" ] && ! awk -v e="$elapsed" 'BEGIN { exit !(e <= 15) }'; then
    problems+=" ended ${elapsed}s after the error (limit 15);"
  fi
  if [ -n "$problems" ]; then
    echo "FAIL $name:$problems stderr:"
    sed 's/^/    /' "$tmp/$name.err"
    failed=1
  else
    echo "ok   $name: exit $rc, ${elapsed}s after: $(grep -E "$pattern" "$tmp/$name.err")"
  fi
}

for np in 2 4; do
  run_case "$np" forward 2
  run_case "$np" backward 2
  run_case "$np" optimizer 3
  run_case "$np" evaluation 2
  run_case "$np" save 0
done
exit "$failed"
