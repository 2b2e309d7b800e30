#!/usr/bin/env bash
# Under mpirun, a rank that gets a bad input does not leave the others waiting: the whole job
# exits non-zero within 10 seconds, printing the failing rank's message once. Rank 1 is given a
# missing data file through mpirun's MPMD form (as a node-local path missing on one node would).
# Usage: rank_failure.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
source "$(dirname "$0")/lib/token_files.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tokens=()
for i in $(seq 0 599); do tokens+=($((i % 97))); done
write_tokens "$tmp/good.bin" 20240520 1 600 "${tokens[@]}"
cat > "$tmp/job.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 3},
  "zt": {"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 100, "n_positions": 16},
         "seq_len": 4, "steps": 2, "train_data": "$tmp/good.bin", "output_dir": "$tmp/out"}
}
JSON

# The job itself works on two ranks.
mpirun -np 2 --oversubscribe "$bin/zt-train" --config "$tmp/job.json" > "$tmp/ok.log" 2>&1 ||
  { echo "FAIL: the two-rank job does not run:"; cat "$tmp/ok.log"; exit 1; }

start=$(date +%s)
timeout 60 mpirun --oversubscribe -np 1 "$bin/zt-train" --config "$tmp/job.json" \
  : -np 1 "$bin/zt-train" --config "$tmp/job.json" --set zt.train_data="$tmp/missing.bin" \
  > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
elapsed=$(( $(date +%s) - start ))
ours=$(grep -c '^zt-train: ' "$tmp/stderr")
echo "exit $rc after ${elapsed}s; stderr:"
sed 's/^/    /' "$tmp/stderr"
failed=0
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit code $rc"; failed=1; }
[ "$elapsed" -le 10 ] || { echo "FAIL: took ${elapsed}s (limit 10)"; failed=1; }
[ "$ours" -eq 1 ] || { echo "FAIL: $ours zt-train lines, want exactly 1"; failed=1; }
grep -q '^zt-train: rank 1: token file .*missing\.bin does not exist' "$tmp/stderr" ||
  { echo "FAIL: rank 1's message is missing"; failed=1; }
[ "$failed" -eq 0 ] && echo "the job ended in ${elapsed}s with rank 1's message"

# A loss that diverges is known to every rank at once (it is reduced): reported once, exit 1.
timeout 60 mpirun --oversubscribe -np 2 "$bin/zt-train" --config "$tmp/job.json" \
  --set 'optimizer={"type": "SGD", "params": {"lr": 1e8}}' --set zt.steps=50 > "$tmp/stdout" 2> "$tmp/stderr"
rc=$?
ours=$(grep -c '^zt-train: ' "$tmp/stderr")
if [ "$rc" -ne 1 ] || [ "$ours" -ne 1 ] || ! grep -q 'loss became' "$tmp/stderr"; then
  echo "FAIL: diverging loss: exit $rc, $ours zt-train lines:"
  sed 's/^/    /' "$tmp/stderr"
  failed=1
else
  echo "diverging loss: $(grep '^zt-train: ' "$tmp/stderr")"
fi
exit "$failed"
