#!/usr/bin/env bash
# The planner's answer held against real runs. Told a device memory, zt-estimate names the
# cheapest configuration that fits; that configuration trains under zt.device_memory_limit set
# to the same size, and the cheaper one just before it, which the planner rejected, stops with
# the out-of-memory error. Each limit is exactly the device peak the planner gives the choice it
# must name, not a byte more, so a plan one byte low fails the run that should train.
# gpt2-tiny, 2 ranks, fp32, B=4, T=32, 2 steps, for two limits:
#   - stage 1's peak: stage 1 fits, stage 0 (the cheaper) does not;
#   - stage 1 with the optimizer offloaded to cpu: it fits, stage 2 (cheaper) does not.
# Usage: memory_fit.sh BIN_DIR SOURCE_DIR
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v python3 > /dev/null || { echo "skip: no python3 (reads the plan's JSON)"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"

job=(--config configs/gpt2-tiny.json --set train_micro_batch_size_per_gpu=4 --set zt.seq_len=32
     --set zt.steps=2 --set zt.eval_every=0 --set scheduler.params.total_num_steps=2)
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# choice STAGE OFFLOAD: the --set arguments of that ZeRO choice.
choice() {
  echo --set zero_optimization.stage="$1" --set zero_optimization.offload_optimizer.device="$2"
}
# The plan without a limit: every choice's device peak, cheapest first.
"$bin/zt-estimate" "${job[@]}" --ranks 2 --json "$tmp/all.json" > "$tmp/all.txt" ||
  { fail "zt-estimate:"; cat "$tmp/all.txt"; exit 1; }
peak_of() {  # STAGE OFFLOAD -> bytes
  python3 -c "import json,sys
for c in json.load(open('$tmp/all.json'))['cheapest_first']:
  if c['stage'] == $1 and c['offload_optimizer'] == '$2' and c['offload_param'] == 'none': print(c['device_bytes'])"
}

# check STAGE OFFLOAD: the limit is that choice's device peak; the planner must name it first,
# it must train, and the one before it must run out of memory.
check() {
  local stage=$1 offload=$2 limit
  limit=$(peak_of "$stage" "$offload")
  [ -n "$limit" ] || { fail "no plan row for stage $stage offload $offload"; return; }
  local name="s${stage}_$offload"
  "$bin/zt-estimate" "${job[@]}" --ranks 2 --device-memory "$limit" --json "$tmp/$name.json" \
    > "$tmp/$name.plan" || { fail "zt-estimate --device-memory $limit"; return; }
  # The first fitting choice, and the rejected one just before it.
  read -r named rejected < <(python3 -c "import json
order = json.load(open('$tmp/$name.json'))['cheapest_first']
first = next(i for i, c in enumerate(order) if c['fits'])
text = lambda c: '%d:%s:%s' % (c['stage'], c['offload_optimizer'], c['offload_param'])
print(text(order[first]), text(order[first - 1]) if first > 0 else 'none')")
  echo "limit $limit bytes: zt-estimate names stage ${named%%:*} (${named#*:}), rejects ${rejected}"
  echo "    $(grep '^fits' "$tmp/$name.plan")"
  [ "$named" = "$stage:$offload:none" ] || fail "expected stage $stage offload $offload first, got $named"
  [ "$rejected" != none ] || { fail "nothing cheaper was rejected"; return; }

  IFS=: read -r r_stage r_offload _ <<< "$rejected"
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" "${job[@]}" $(choice "$stage" "$offload") \
    --set zt.device_memory_limit="$limit" --set zt.output_dir="$tmp/$name.fit" \
    > "$tmp/$name.fit.out" 2> "$tmp/$name.fit.err"
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "stage $stage offload $offload does not train under its planned peak $limit (exit $rc):"
    grep -v '^zt-run: ' "$tmp/$name.fit.err" | tail -3 | sed 's/^/    /'
  else
    local used
    used=$(python3 -c "import json
rows = [json.loads(l) for l in open('$tmp/$name.fit/metrics.jsonl')]
print(int(rows[-1]['summary']['peak_bytes_max']['total']))")
    echo "    stage $stage offload $offload trains: peak $used of $limit bytes"
  fi
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" "${job[@]}" $(choice "$r_stage" "$r_offload") \
    --set zt.device_memory_limit="$limit" --set zt.output_dir="$tmp/$name.oom" \
    > "$tmp/$name.oom.out" 2> "$tmp/$name.oom.err"
  rc=$?
  local line
  line=$(grep -m1 'out of device memory' "$tmp/$name.oom.err")
  if [ "$rc" -eq 0 ] || [ -z "$line" ]; then
    fail "the rejected stage $r_stage offload $r_offload did not stop with out of device memory (exit $rc)"
    tail -3 "$tmp/$name.oom.err" | sed 's/^/    /'
  else
    echo "    the rejected stage $r_stage offload $r_offload: exit $rc, ${line:0:160}..."
  fi
}
check 1 none
check 1 cpu
[ "$failed" -eq 0 ] && echo "memory fit: the planner's choices train at their planned peaks; the cheaper ones it rejected run out of memory"
exit "$failed"
