#!/usr/bin/env bash
# A rank that stops (SIGSTOP) does not leave the others waiting in a collective forever: with
# zt.comm_timeout_s=20 the job ends within 40 s of the stop, with exit code 3 (collective
# timeout) and one line from the rank that saw it naming the timeout, the collective and the
# step. Trains configs/gpt2-tiny.json on 2 ranks, on the corpus when it was fetched, else on a
# small generated token file (what it trains on does not matter here). Nothing is left running.
# Usage: stuck_rank.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun.
set -u
bin=$1 src=$2
source "$(dirname "$0")/lib/token_files.bash"
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
launcher=""
stopped=""
cleanup() {
  [ -n "$stopped" ] && kill -CONT "$stopped" 2> /dev/null
  if [ -n "$launcher" ]; then
    for pid in $(pgrep -P "$launcher"); do kill -KILL "$pid" 2> /dev/null; done
    kill -KILL "$launcher" 2> /dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
now() { date +%s.%N; }

cd "$src"
data=()
if [ ! -f data/corpus/train.bin ]; then
  tokens=()
  for i in $(seq 0 4095); do tokens+=($(( (i * 7919) % 50257 ))); done
  write_tokens "$tmp/train.bin" 20240520 1 4096 "${tokens[@]}"
  data=(--set zt.train_data="$tmp/train.bin" --set 'zt.val_data=""')
  echo "no corpus: training on a generated token file"
fi
mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json "${data[@]}" \
  --set zt.output_dir="$tmp/out" --set zt.steps=200 --set zt.eval_every=0 \
  --set zt.comm_timeout_s=20 > "$tmp/stdout" 2> "$tmp/stderr" &
launcher=$!

# Wait for three training steps (rows in metrics.jsonl), at most 120 s.
for _ in $(seq 1 600); do
  rows=$(grep -c '"loss"' "$tmp/out/metrics.jsonl" 2> /dev/null || true)
  [ "${rows:-0}" -ge 3 ] && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.2
done
[ "${rows:-0}" -ge 3 ] || { echo "FAIL: training did not reach step 3:"; cat "$tmp/stderr"; exit 1; }

# Rank 1's process: the launcher's child whose environment says rank 1.
for pid in $(pgrep -P "$launcher"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
    stopped=$pid
  fi
done
[ -n "$stopped" ] || { echo "FAIL: rank 1's process not found among $(pgrep -P "$launcher")"; exit 1; }
kill -STOP "$stopped"
t_stop=$(now)
echo "stopped rank 1 (pid $stopped) after step $rows"

# The job must end by itself; give it 60 s before calling it hung.
for _ in $(seq 1 300); do
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.2
done
t_end=$(now)
if kill -0 "$launcher" 2> /dev/null; then
  echo "FAIL: the job still runs 60 s after rank 1 stopped"
  sed 's/^/    /' "$tmp/stderr"
  exit 1
fi
wait "$launcher"
rc=$?
launcher=""
elapsed=$(awk -v a="$t_stop" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')
ours=$(grep -c '^zt-train: ' "$tmp/stderr")
echo "exit $rc, ${elapsed}s after the stop; stderr:"
sed 's/^/    /' "$tmp/stderr"
failed=0
[ "$rc" -eq 3 ] || { echo "FAIL: exit code $rc, want 3 (collective timeout)"; failed=1; }
awk -v e="$elapsed" 'BEGIN { exit !(e <= 40) }' || { echo "FAIL: took ${elapsed}s (limit 40)"; failed=1; }
[ "$ours" -eq 1 ] || { echo "FAIL: $ours zt-train lines, want exactly 1"; failed=1; }
grep -Eq '^zt-train: rank 0: (all_gather|all_reduce|reduce_scatter|broadcast) of [0-9]+ bytes.* at (step [0-9]+|evaluation after step [0-9]+) did not complete within zt.comm_timeout_s = 20 s' "$tmp/stderr" ||
  { echo "FAIL: no line naming the collective, the step and the timeout"; failed=1; }
# Nothing of the job is left: the stopped process was killed with the others. mpirun ends a job
# with SIGCONT and SIGTERM, then SIGKILL a second later; zt-train takes SIGTERM as a preemption
# request (it is stuck in a collective here, so it never gets to act on it), so it is the SIGKILL
# that ends it: allow 5 s for it to be gone (a zombie counts as gone).
alive() { kill -0 "$stopped" 2> /dev/null && [ "$(ps -o stat= -p "$stopped" | cut -c1)" != Z ]; }
for _ in $(seq 1 50); do
  alive || break
  sleep 0.1
done
if alive; then
  echo "FAIL: rank 1 (pid $stopped) is still there 5 s after the job ended"; failed=1
fi
[ "$failed" -eq 0 ] && echo "the job ended ${elapsed}s after rank 1 stopped: $(grep '^zt-train: ' "$tmp/stderr")"
exit "$failed"
