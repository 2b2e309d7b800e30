#!/usr/bin/env bash
# zt-bench checkpoint saves through zt-train's Checkpointer (train/checkpointer.h): a clean run
# writes its JSON and removes its checkpoints; with ZT_TEST_FAULT at the Checkpointer's fault
# points (which only the Checkpointer calls) the bench stops there, naming the point, and leaves
# the directory as the save protocol does: the saves before it committed, `latest` naming the
# last of them, the failed save's shard file in step<N>.tmp (commit) and nothing committed for it.
# Saves are numbered 1, 2, ...: odd ones synchronous, even ones asynchronous (a writer thread).
# Usage: bench_checkpoint.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bench=("$bin/zt-bench" checkpoint --model gpt2-tiny -B 1 -T 16 --repeats 2 --path "$out")

"${bench[@]}" --json "$out/bench.json" > "$out/log" 2>&1 ||
  { cat "$out/log"; echo "FAIL: zt-bench checkpoint exited $?"; exit 1; }
cat "$out/log"
python3 - "$out/bench.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
assert j["bench"] == "checkpoint" and j["shard_bytes"] > 0, j
assert len(j["sync_ms_per_round"]) == 2 and len(j["async_blocked_ms_per_round"]) == 2, j
assert j["async_write_ms"] > 0 and j["async_total_ms"] >= j["async_blocked_ms"], j
PY
[ -z "$(ls -A "$out" | grep zt_bench_checkpoint_)" ] || { echo "FAIL: checkpoints left behind"; exit 1; }

# expect_fault SPEC STEP LATEST: the bench fails at the fault of save STEP, `latest` is LATEST.
expect_fault() {
  local spec=$1 step=$2 latest=$3
  rm -rf "$out"/zt_bench_checkpoint_*
  if ZT_TEST_FAULT=$spec "${bench[@]}" > "$out/log" 2>&1; then
    cat "$out/log"; echo "FAIL: $spec: zt-bench checkpoint succeeded"; exit 1
  fi
  local point=${spec#point=}; point=${point%%,*}
  grep -q "injected fault (ZT_TEST_FAULT) at $point of unit .*, step $step, on rank 0" "$out/log" ||
    { cat "$out/log"; echo "FAIL: $spec: no injected-fault line"; exit 1; }
  local root
  root=$(ls -d "$out"/zt_bench_checkpoint_*) || { echo "FAIL: $spec: no checkpoint root"; exit 1; }
  [ "$(cat "$root/latest")" = "step$latest" ] ||
    { ls -R "$root"; echo "FAIL: $spec: latest is not step$latest"; exit 1; }
  [ -f "$root/step$latest/manifest.json" ] || { echo "FAIL: $spec: step$latest not committed"; exit 1; }
  [ ! -e "$root/step$step" ] || { echo "FAIL: $spec: step$step committed"; exit 1; }
  if [ "${spec#point=commit}" != "$spec" ]; then
    [ -f "$root/step$step.tmp/rank0.zts" ] ||
      { ls -R "$root"; echo "FAIL: $spec: no finished shard file in step$step.tmp"; exit 1; }
  fi
  echo "ok: $spec"
}
expect_fault "point=commit,rank=0,step=3" 3 2      # a synchronous save, before its commit
expect_fault "point=checkpoint,rank=0,step=2" 2 1  # an asynchronous save, on its writer thread
echo "PASS"
