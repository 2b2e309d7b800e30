#!/usr/bin/env bash
# zt-run --max-restarts on one machine (tools/zt_run_main.cpp, launch/restart_policy.h):
#   - a rank SIGKILLed mid-run, after a checkpoint: one restart line naming the killed rank and
#     the checkpoint's step, the job finishes with exit 0, one restart row in metrics.jsonl, and
#     every step's loss (those before the checkpoint and those redone after it) equal, as text,
#     to a straight run's;
#   - a failure before the first checkpoint (an injected error at step 2, every run): restarted
#     from step 0 once, then "not restarted" with the failure's exit code 1; metrics.jsonl holds
#     the restart row;
#   - exit 2 from the job (a missing data file, which only zt-train opens) is not retried: one
#     mpirun line, exit 2, "not restarted: exit 2 is bad input";
#   - SIGUSR1 to zt-run (a scheduler's preemption warning) reaches the ranks through mpirun: they
#     save a checkpoint and exit 4, which zt-run passes on without a restart;
#   - refused before anything runs, exit 2 and one line: --max-restarts for a program other
#     than zt-train, --min-nodes beyond the hosts.
# 2 ranks of gpt2-tiny (seq_len 32) on the CPU, checkpoints every 4 steps.
# Usage: restart.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun or the corpus.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
launcher=""
cleanup() {
  for pid in $(pgrep -f "zt.output_dir=$tmp/" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
steps=16
job=(--config configs/gpt2-tiny.json --set zt.seq_len=32 --set zt.steps=$steps --set zt.eval_every=0
     --set scheduler.params.total_num_steps=$steps --set 'zt.checkpoint={"every_n_steps": 4}')
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/$1/metrics.jsonl"; }

# ---- a rank killed after a checkpoint ---------------------------------------------------------
"$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" "${job[@]}" --set zt.output_dir="$tmp/straight" \
  > "$tmp/straight.out" 2> "$tmp/straight.err" || { fail "the straight run:"; tail -5 "$tmp/straight.err"; exit 1; }

"$bin/zt-run" --max-restarts 1 -np 2 --cpu -- "$bin/zt-train" "${job[@]}" \
  --set zt.output_dir="$tmp/killed" > "$tmp/killed.out" 2> "$tmp/killed.err" &
launcher=$!
rows=0
for _ in $(seq 1 600); do  # step 6 (a checkpoint at step 4), at most 120 s
  rows=$(grep -c '"loss"' "$tmp/killed/metrics.jsonl" 2> /dev/null || true)
  [ "${rows:-0}" -ge 6 ] && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.1
done
victim=""
for pid in $(pgrep -f "zt.output_dir=$tmp/killed"); do
  tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$pid
done
if [ "${rows:-0}" -lt 6 ] || [ -z "$victim" ]; then
  fail "no rank 1 to kill after step 6 (steps seen: ${rows:-0})"; tail -5 "$tmp/killed.err"; exit 1
fi
kill -KILL "$victim"
echo "SIGKILL to rank 1 (pid $victim) after step $rows"
timeout 300 tail --pid="$launcher" -f /dev/null
wait "$launcher"
rc=$?
grep '^zt-run: ' "$tmp/killed.err" | sed 's/^/    /'
restart_lines=$(grep -c '^zt-run: restart ' "$tmp/killed.err")
restart=$(grep '"event":"restart"' "$tmp/killed/metrics.jsonl")
from=$(grep -o '"from_step":[0-9]*' <<< "$restart" | cut -d: -f2)
echo "    metrics.jsonl: $restart"
[ "$rc" -eq 0 ] || fail "exit $rc after one restart (want 0)"
[ "$restart_lines" -eq 1 ] || fail "$restart_lines restart lines (want 1)"
grep -Eq "^zt-run: restart 1/1 after rank 1 on node [^ ]+ exited on signal 9 \(Killed\) \(exit 137\): from step ${from:-x} on host [^ ]+ \(2 ranks, gradient_accumulation_steps 1\)$" "$tmp/killed.err" ||
  fail "the restart line does not name rank 1's signal and the checkpoint's step"
[ "$(grep -c '"event":"restart"' "$tmp/killed/metrics.jsonl")" -eq 1 ] || fail "not one restart row in metrics.jsonl"
case "${from:-x}" in 4|8|12|16|20) ;; *) fail "the restart row's from_step is '${from:-}' (want a checkpoint's step)";; esac
if [ "$(losses killed)" = "$(losses straight)" ]; then
  echo "ok: restarted from step $from; the losses of all $steps steps equal the straight run's"
else
  fail "the losses differ from the straight run's:"; diff <(losses straight) <(losses killed) | head -10
fi

# ---- a failure before the first checkpoint, every time ------------------------------------------
ZT_TEST_FAULT="point=forward,rank=1,step=2" "$bin/zt-run" --max-restarts 1 -np 2 --cpu -- \
  "$bin/zt-train" "${job[@]}" --set zt.output_dir="$tmp/early" > "$tmp/early.out" 2> "$tmp/early.err"
rc=$?
grep '^zt-run: ' "$tmp/early.err" | sed 's/^/    /'
[ "$rc" -eq 1 ] || fail "a failure at step 2 every run: exit $rc (want 1, the failure's)"
[ "$(grep -c '^zt-run: mpirun ' "$tmp/early.err")" -eq 2 ] || fail "not two launches"
grep -Eq '^zt-run: restart 1/1 after a failure \(exit 1\): from step 0 on host ' "$tmp/early.err" ||
  fail "no restart from step 0"
grep -q '^zt-run: not restarted: all 1 restarts (--max-restarts) used; exit 1$' "$tmp/early.err" ||
  fail "no line saying the restarts are used up"
grep -q '"event":"restart","restart":1,.*"from_step":0,' "$tmp/early/metrics.jsonl" ||
  fail "metrics.jsonl lost the restart row of a restart from step 0"
[ "$failed" -eq 0 ] && echo "ok: a failure before any checkpoint: restarted from step 0, then exit 1"

# ---- exit 2 is not retried ----------------------------------------------------------------------
"$bin/zt-run" --max-restarts 2 -np 2 --cpu -- "$bin/zt-train" "${job[@]}" \
  --set zt.train_data="$tmp/none.bin" --set zt.output_dir="$tmp/bad" > "$tmp/bad.out" 2> "$tmp/bad.err"
rc=$?
[ "$rc" -eq 2 ] || fail "a missing data file: exit $rc (want 2)"
[ "$(grep -c '^zt-run: mpirun ' "$tmp/bad.err")" -eq 1 ] || fail "a job that exited 2 was launched again"
grep -q '^zt-run: not restarted: exit 2 is bad input' "$tmp/bad.err" || fail "no line saying exit 2 is not restarted"
[ "$failed" -eq 0 ] && echo "ok: exit 2 not retried: $(grep '^zt-run: not restarted' "$tmp/bad.err")"

# ---- a preemption signal is passed on, not restarted ------------------------------------------
"$bin/zt-run" --max-restarts 1 -np 2 --cpu -- "$bin/zt-train" "${job[@]}" \
  --set zt.output_dir="$tmp/preempted" > "$tmp/preempted.out" 2> "$tmp/preempted.err" &
launcher=$!
for _ in $(seq 1 600); do
  grep -q '"step":2,"loss"' "$tmp/preempted/metrics.jsonl" 2> /dev/null && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.1
done
kill -USR1 "$launcher"
timeout 120 tail --pid="$launcher" -f /dev/null
wait "$launcher"
rc=$?
[ "$rc" -eq 4 ] || { fail "SIGUSR1 to zt-run: exit $rc (want 4, preempted)"; tail -5 "$tmp/preempted.err"; }
[ "$(grep -c '^zt-run: mpirun ' "$tmp/preempted.err")" -eq 1 ] || fail "a preempted job was launched again"
grep -q '^zt-run: not restarted: zt-run passed a signal on to it (exit 4)$' "$tmp/preempted.err" ||
  fail "no line saying the signal stopped the job"
[ -f "$tmp/preempted/checkpoints/latest" ] || fail "the preempted job saved no checkpoint"
[ "$failed" -eq 0 ] && echo "ok: SIGUSR1 to zt-run: saved $(cat "$tmp/preempted/checkpoints/latest"), exit 4, not restarted"

# ---- refused before anything runs ---------------------------------------------------------------
expect_refusal() {
  local what=$1 pattern=$2; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -q "^zt-run: .*$pattern" "$tmp/err"; then
    fail "$what: exit $rc:"; sed 's/^/    /' "$tmp/err"
  else
    echo "ok: $what: exit 2, $(cat "$tmp/err")"
  fi
}
expect_refusal "not zt-train" "restarts zt-train only" "$bin/zt-run" --max-restarts 1 -np 2 -- /bin/true
printf 'localhost slots=2\n' > "$tmp/hosts"
expect_refusal "--min-nodes beyond the hosts" "--min-nodes 2 is more than the job's 1 host" \
  "$bin/zt-run" --max-restarts 1 --min-nodes 2 --hostfile "$tmp/hosts" -np 2 -- "$bin/zt-train" "${job[@]}"
exit "$failed"
