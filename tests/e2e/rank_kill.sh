#!/usr/bin/env bash
# A rank killed with SIGKILL in the middle of training ends the whole job: within 30 s of the
# kill zt-run (mpirun) exits non-zero with a line naming the lost rank, and no zt-train process
# of the job is left. Cases: 2 ranks, rank 1 killed; 4 ranks on this machine (oversubscribed
# when it has fewer cores), rank 2 killed. The job is started through zt-run (no Open MPI
# variables set: zt-run adds what root and oversubscription need) on configs/gpt2-tiny.json,
# on the corpus when it was fetched, else on a small generated token file.
# Usage: rank_kill.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun.
set -u
bin=$1 src=$2
source "$(dirname "$0")/lib/token_files.bash"
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
export OMP_NUM_THREADS=1
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

cd "$src"
data=()
if [ ! -f data/corpus/train.bin ]; then
  tokens=()
  for i in $(seq 0 4095); do tokens+=($(( (i * 7919) % 50257 ))); done
  write_tokens "$tmp/train.bin" 20240520 1 4096 "${tokens[@]}"
  data=(--set zt.train_data="$tmp/train.bin" --set 'zt.val_data=""')
  echo "no corpus: training on a generated token file"
fi

# The job's live (not zombie) zt-train processes: their command lines name its output dir.
live_ranks() {
  local pid
  for pid in $(pgrep -f "zt.output_dir=$1"); do
    [ "$(ps -o stat= -p "$pid" 2> /dev/null | cut -c1)" = Z ] || echo "$pid"
  done
}

failed=0
# kill_case RANKS VICTIM
kill_case() {
  local ranks=$1 victim_rank=$2 out="$tmp/np$1" before=$failed
  "$bin/zt-run" -np "$ranks" --cpu -- "$bin/zt-train" --config configs/gpt2-tiny.json "${data[@]}" \
    --set zt.output_dir="$out" --set zt.steps=500 --set zt.eval_every=0 \
    > "$out.stdout" 2> "$out.stderr" &
  launcher=$!
  local rows=0
  for _ in $(seq 1 600); do  # three training steps, at most 120 s
    rows=$(grep -c '"loss"' "$out/metrics.jsonl" 2> /dev/null || true)
    [ "${rows:-0}" -ge 3 ] && break
    kill -0 "$launcher" 2> /dev/null || break
    sleep 0.2
  done
  if [ "${rows:-0}" -lt 3 ]; then
    echo "FAIL np $ranks: training did not reach step 3:"; sed 's/^/    /' "$out.stderr"
    failed=1; return
  fi
  local victim="" pid
  for pid in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim_rank"; then
      victim=$pid
    fi
  done
  [ -n "$victim" ] || { echo "FAIL np $ranks: rank $victim_rank's process not found"; failed=1; return; }
  kill -KILL "$victim"
  local t_kill t_end rc
  t_kill=$(now)
  for _ in $(seq 1 300); do  # 60 s before calling it hung
    kill -0 "$launcher" 2> /dev/null || break
    sleep 0.1
  done
  t_end=$(now)
  if kill -0 "$launcher" 2> /dev/null; then
    echo "FAIL np $ranks: the job still runs 60 s after rank $victim_rank was killed"
    sed 's/^/    /' "$out.stderr"; failed=1; return
  fi
  wait "$launcher"
  rc=$?
  launcher=""
  local elapsed
  elapsed=$(awk -v a="$t_kill" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')
  # Processes the launcher ended may take a moment to be reaped: allow 5 s.
  local left=""
  for _ in $(seq 1 50); do
    left=$(live_ranks "$out")
    [ -z "$left" ] && break
    sleep 0.1
  done
  local named
  named=$(grep -E "rank $victim_rank\b.*(exited on signal 9|signal 9|killed|lost)" "$out.stderr" | head -1)
  echo "np $ranks: SIGKILL to rank $victim_rank (pid $victim) after step $rows; exit $rc ${elapsed}s later; stderr:"
  sed 's/^/    /' "$out.stderr"
  [ "$rc" -ne 0 ] || { echo "FAIL np $ranks: exit code 0"; failed=1; }
  awk -v e="$elapsed" 'BEGIN { exit !(e <= 30) }' || { echo "FAIL np $ranks: took ${elapsed}s (limit 30)"; failed=1; }
  [ -n "$named" ] || { echo "FAIL np $ranks: no line names rank $victim_rank as lost"; failed=1; }
  [ -z "$left" ] || { echo "FAIL np $ranks: zt-train processes left: $left"; failed=1; }
  grep -q '^zt-run: mpirun ' "$out.stderr" || { echo "FAIL np $ranks: zt-run did not print its mpirun line"; failed=1; }
  [ "$failed" -eq "$before" ] && echo "ok np $ranks: ended ${elapsed}s after the kill, exit $rc, naming the lost rank: $named"
}

kill_case 2 1
kill_case 4 2
exit "$failed"
