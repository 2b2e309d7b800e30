#!/usr/bin/env bash
# Sharded checkpoints end to end on configs/gpt2-tiny.json (T=32, 2 rows per rank and micro-batch,
# a global batch of 8 rows, so gradient accumulation follows the world size):
#   - exact resume: 2 ranks, ZeRO stage 2, 6 steps straight vs 3 steps, a checkpoint, and
#     zt-train --resume for steps 4-6: the same losses, gradient norms and learning rates in
#     metrics.jsonl and the same saved weights, bit for bit;
#   - resharding round trip, 8 steps: 4 ranks stage 3 (steps 1-2) -> 2 ranks stage 1 (3-4) ->
#     1 rank stage 0 (5-6) -> 4 ranks stage 2 (7-8), without and with offload_optimizer cpu
#     (stages 1-3; stage 0 cannot offload): every step's loss within 1e-6 (relative) of a straight
#     4-rank stage-3 run (the same tokens per step: the data position is mapped by tokens; the
#     reductions add in other orders), and the first step after each load says where it came from;
#   - a save killed with SIGKILL on either rank while writing its shard file, or before the
#     commit, leaves the previous checkpoint as `latest`, and resuming from it finishes with the
#     straight run's weights bit for bit;
#   - bad checkpoints (a flipped byte, a truncated shard, a missing shard, a manifest whose file
#     name points outside, another model) are each refused before any step with one line naming
#     the file and the problem, exit 2;
#   - SIGTERM to one rank mid-run: every rank saves after the step in progress and exits 4; the
#     resumed run finishes with the straight run's weights bit for bit; SIGUSR1 to every rank in
#     the middle of a step's compute: the same exit 4, nothing corrupted;
#   - zt.checkpoint.async: the same exact resume with every save written behind training (each
#     save's metrics row says how long training was blocked and how long the write took), and a
#     rank SIGKILLed while its background writer writes, or before the commit, leaves the
#     previous checkpoint as `latest`.
# Usage: checkpoint_resume.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
status=0
fail() { echo "FAIL: $*"; status=1; }
# name, ranks, extra arguments; zt-train's exit code. Every run writes its log to $out/name.log.
train() {
  local name=$1 ranks=$2
  shift 2
  mpirun --oversubscribe -np "$ranks" "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.eval_every=0 --set zt.seq_len=32 --set train_micro_batch_size_per_gpu=2 \
    --set train_batch_size=8 --set gradient_accumulation_steps=null --set scheduler.params.total_num_steps=8 \
    --set zt.output_dir="$out/$name" "$@" > "$out/$name.log" 2>&1
}
rows() { grep '"step":' "$out/$1/metrics.jsonl" | grep -o '"step":[^,]*,"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*'; }
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$out/$1/metrics.jsonl" | sed 's/"step":\([0-9]*\),"loss":/\1 /'; }
latest() { cat "$1/latest" 2>/dev/null; }

# ---- exact resume -------------------------------------------------------------------------
s2="--set zero_optimization.stage=2"
train straight 2 $s2 --set zt.steps=6 --set zt.save_weights="$out/straight.safetensors" ||
  fail "the straight run: $(tail -n 3 "$out/straight.log")"
train resume 2 $s2 --set zt.steps=3 --set 'zt.checkpoint={"every_n_steps":3}' ||
  fail "3 steps with a checkpoint: $(tail -n 3 "$out/resume.log")"
rows resume > "$out/first_half"
train resume 2 $s2 --set zt.steps=6 --set zt.save_weights="$out/resume.safetensors" --resume ||
  fail "--resume: $(tail -n 3 "$out/resume.log")"
grep -q "^resumed from $out/resume/checkpoints/step3: step 3 of a ZeRO stage 2 fp32 run on 2 ranks" "$out/resume.log" ||
  fail "no 'resumed from' line: $(grep -m1 resumed "$out/resume.log")"
# The resumed run's log continues the first one: its 3 rows, then the resumed 3.
[ "$(rows straight)" = "$(rows resume)" ] && [ "$(rows straight | wc -l)" = 6 ] &&
  [ "$(rows resume | head -3)" = "$(cat "$out/first_half")" ] ||
  fail "metrics differ: straight $(rows straight | tr '\n' ' ') vs resumed $(rows resume | tr '\n' ' ')"
cmp -s "$out/straight.safetensors" "$out/resume.safetensors" || fail "weights differ after resume"
[ $status -eq 0 ] && echo "exact resume: 6 steps straight = 3 + --resume + 3 (losses, norms, lrs, weights bitwise)"

# ---- resharding round trip ------------------------------------------------------------------
train straight4 4 --set zero_optimization.stage=3 --set zt.steps=8 || fail "straight 4-rank stage 3"
for offload in none cpu; do
  ck="$out/chain_$offload/checkpoints"
  oo() {  # stage: the offload arguments for it
    [ "$offload" = cpu ] && [ "$1" -ge 1 ] && echo --set zero_optimization.offload_optimizer.device=cpu
  }
  legs="4:3:2 2:1:4 1:0:6 4:2:8"
  first=1
  : > "$out/chain_$offload.losses"
  for leg in $legs; do
    IFS=: read -r ranks stage until <<< "$leg"
    resume=()
    [ $first -eq 0 ] && resume=(--resume)
    # shellcheck disable=SC2046
    train "chain_$offload" "$ranks" --set zero_optimization.stage="$stage" $(oo "$stage") \
      --set zt.steps="$until" --set zt.checkpoint.dir="$ck" --set 'zt.checkpoint.every_n_steps=2' \
      --set zt.checkpoint.keep_last=1 "${resume[@]}" ||
      fail "chain ($offload) leg $leg: $(tail -n 3 "$out/chain_$offload.log")"
    [ $first -eq 0 ] && ! grep -q "^resumed from $ck/step$((until - 2)): step $((until - 2)) of a ZeRO stage" "$out/chain_$offload.log" &&
      fail "chain ($offload) leg $leg: no 'resumed from' line"
    first=0
  done
  # One log across the legs: each resume kept the rows up to its checkpoint.
  losses "chain_$offload" > "$out/chain_$offload.losses"
  worst=$(losses straight4 | join - "$out/chain_$offload.losses" |
    awk 'BEGIN { w = 0; n = 0 } { d = ($2 - $3) / $2; if (d < 0) d = -d; if (d > w) w = d; n++ }
         END { if (n != 8) print "steps:" n; else printf "%.2e", w }')
  awk -v w="$worst" 'BEGIN { exit !(w ~ /^[0-9.e+-]+$/ && w + 0 < 1e-6) }' ||
    fail "reshard chain ($offload offload): worst relative loss difference to the straight run $worst"
  [ $status -eq 0 ] && echo "reshard 4 ranks stage 3 -> 2 stage 1 -> 1 stage 0 -> 4 stage 2 (offload_optimizer $offload): 8 losses within $worst (relative) of a straight 4-rank stage-3 run"
  ls -d "$ck"/step* | grep -qv "step8$" && fail "keep_last 1 left $(ls "$ck")"
done

# ---- asynchronous save -----------------------------------------------------------------------
async=(--set 'zt.checkpoint={"every_n_steps":1,"async":true}')
train async 2 $s2 --set zt.steps=3 "${async[@]}" || fail "3 steps saving async: $(tail -n 3 "$out/async.log")"
rows async > "$out/async_first_half"
saves=$(grep -c '"checkpoint":[0-9]*,"async":true,"blocked_ms":' "$out/async/metrics.jsonl")
train async 2 $s2 --set zt.steps=6 "${async[@]}" --set zt.save_weights="$out/async.safetensors" --resume ||
  fail "--resume from an async save: $(tail -n 3 "$out/async.log")"
[ "$(rows straight)" = "$(rows async)" ] && [ "$(rows async | head -3)" = "$(cat "$out/async_first_half")" ] ||
  fail "async: metrics differ from the straight run"
cmp -s "$out/straight.safetensors" "$out/async.safetensors" || fail "async: weights differ after resume"
[ "$saves" = 3 ] && [ "$(latest "$out/async/checkpoints")" = step6 ] ||
  fail "async: $saves save rows in the first run, latest '$(latest "$out/async/checkpoints")'"
[ $status -eq 0 ] && echo "async save: 3 + --resume + 3 = 6 steps straight (bitwise); $(grep -m1 'async: training blocked' "$out/async.log" | sed 's/.*| saved/saved/; s|'"$out"'/||')"

# ---- SIGKILL during a save ------------------------------------------------------------------
ck="$out/kill/checkpoints"
for point in checkpoint,rank=1,unit=1 checkpoint,rank=0,unit=0 commit,rank=0 \
             async:checkpoint,rank=1,unit=1 async:commit,rank=0; do
  mode=()
  [[ $point == async:* ]] && mode=(--set zt.checkpoint.async=true) && point=${point#async:}
  ZT_TEST_FAULT="point=$point,step=4,action=kill" train kill 2 $s2 --set zt.steps=6 \
    --set 'zt.checkpoint.every_n_steps=2' --set zt.checkpoint.dir="$ck" "${mode[@]}"
  rc=$?
  [ $rc -ne 0 ] || fail "a save killed at $point: exit 0"
  [ "$(latest "$ck")" = step2 ] && [ -f "$ck/step2/manifest.json" ] && [ ! -d "$ck/step4" ] ||
    fail "a save killed at $point: latest '$(latest "$ck")', $(ls "$ck" | tr '\n' ' ')"
  train kill 2 $s2 --set zt.steps=6 --set zt.checkpoint.dir="$ck" \
    --set zt.save_weights="$out/kill.safetensors" --resume ||
    fail "resume after a save killed at $point: $(tail -n 3 "$out/kill.log")"
  cmp -s "$out/straight.safetensors" "$out/kill.safetensors" ||
    fail "resumed after a save killed at $point: weights differ from the straight run"
  rm -rf "$ck/step6" && printf 'step2\n' > "$ck/latest"  # the next point starts over
done
[ $status -eq 0 ] && echo "SIGKILL while writing either rank's shard file or before the commit, saving synchronously and asynchronously: latest stays step2 (the step4 save never appears), and resuming from it gives the straight weights bitwise"

# ---- bad checkpoints ------------------------------------------------------------------------
good="$out/resume/checkpoints/step3"
refused() {  # name, the line expected (a grep -E pattern), extra arguments
  local name=$1 pattern=$2
  shift 2
  train "bad_$name" 2 $s2 --set zt.steps=6 --resume "$out/bad/$name" "$@"
  local rc=$?
  local lines
  lines=$(grep -c '^zt-train: ' "$out/bad_$name.log")
  [ $rc -eq 2 ] && [ "$lines" = 1 ] && grep -qE "^zt-train: .*$pattern" "$out/bad_$name.log" &&
    ! grep -q '^step ' "$out/bad_$name.log" ||
    fail "bad checkpoint '$name': exit $rc, $lines lines: $(grep '^zt-train: ' "$out/bad_$name.log" | head -2)"
  echo "  $name: $(grep -m1 '^zt-train: ' "$out/bad_$name.log" | sed "s|$out/||g")"
}
fresh() { rm -rf "$out/bad/$1"; mkdir -p "$out/bad"; cp -r "$good" "$out/bad/$1"; }
fresh flipped
byte=$(dd if="$out/bad/flipped/rank1.zts" bs=1 skip=1000 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "\\x$(printf %02x $(((byte + 1) % 256)))" | dd of="$out/bad/flipped/rank1.zts" bs=1 seek=1000 conv=notrunc 2>/dev/null
refused flipped "flipped/rank1.zts.*(checksum|CRC)"
fresh truncated
truncate -s 4096 "$out/bad/truncated/rank0.zts"
refused truncated "truncated/rank0.zts"
fresh missing
rm "$out/bad/missing/rank1.zts"
refused missing "missing/rank1.zts"
fresh outside
sed -i 's|"rank0.zts"|"../rank0.zts"|' "$out/bad/outside/manifest.json"
refused outside "outside/manifest.json.*\.\./rank0\.zts"
fresh other_model
refused other_model "other_model/manifest.json" --set 'zt.model={"n_layer":2,"n_head":4,"n_embd":128,"vocab_size":50257,"n_positions":256}'
[ $status -eq 0 ] && echo "bad checkpoints (flipped byte, truncated shard, missing shard, a file name pointing outside, another model): each refused with one line naming the file, exit 2, no step trained"

# ---- preemption -----------------------------------------------------------------------------
# Each rank's exit code through a wrapper; the evaluation every step slows the run (it changes no
# weight) so that the signal lands mid-run.
codes="$out/preempt.codes"
: > "$codes"
ck="$out/preempt/checkpoints"
mpirun --oversubscribe -np 2 bash -c '"$@"; rc=$?; echo "rank $OMPI_COMM_WORLD_RANK exit $rc" >> '"$codes"'; exit $rc' _ \
  "$bin/zt-train" --config configs/gpt2-tiny.json --set zt.eval_every=1 --set zt.seq_len=32 \
  --set train_micro_batch_size_per_gpu=2 --set train_batch_size=8 --set gradient_accumulation_steps=null \
  --set scheduler.params.total_num_steps=8 \
  $s2 --set zt.steps=6 --set zt.output_dir="$out/preempt" > "$out/preempt.log" 2>&1 &
job=$!
for _ in $(seq 200); do
  grep -q '"step":2,"loss"' "$out/preempt/metrics.jsonl" 2>/dev/null && break
  sleep 0.05
done
rank1=$(for w in $(pgrep -P $job); do pgrep -P "$w"; done | tail -n 1)
[ -n "$rank1" ] && kill -TERM "$rank1"
wait $job
rc=$?
stopped=$(grep -o 'preempted (SIGTERM) after step [0-9]*' "$out/preempt.log" | grep -o '[0-9]*$')
[ $rc -eq 4 ] && [ "$(sort "$codes")" = "$(printf 'rank 0 exit 4\nrank 1 exit 4')" ] && [ -n "$stopped" ] &&
  [ "$stopped" -lt 6 ] && [ "$(latest "$ck")" = "step$stopped" ] ||
  fail "SIGTERM to rank 1: mpirun exit $rc, $(tr '\n' ' ' < "$codes"), stopped '$stopped', latest '$(latest "$ck")': $(grep '^zt-train' "$out/preempt.log" | head -2)"
train preempt 2 $s2 --set zt.steps=6 --set zt.save_weights="$out/preempt.safetensors" --resume ||
  fail "resume after preemption: $(tail -n 3 "$out/preempt.log")"
cmp -s "$out/straight.safetensors" "$out/preempt.safetensors" || fail "weights after preemption and resume differ"
[ $status -eq 0 ] && echo "SIGTERM to rank 1 during step $((stopped)): both ranks saved step$stopped and exited 4; the resumed run gives the straight weights bitwise"

# SIGUSR1 to every rank in the middle of a step's compute (no evaluation between steps): the
# signals reach no compute thread (a handler interrupting oneDNN's GEMMs once corrupted the
# heap); every rank saves after the step and exits 4.
mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json --set zt.eval_every=0 \
  $s2 --set zt.steps=40 --set zt.output_dir="$out/usr1" > "$out/usr1.log" 2>&1 &
job=$!
for _ in $(seq 400); do
  grep -q '"step":3,"loss"' "$out/usr1/metrics.jsonl" 2>/dev/null && break
  sleep 0.05
done
for p in $(pgrep -P $job); do kill -USR1 "$p"; done
wait $job
rc=$?
[ $rc -eq 4 ] && grep -q "preempted (SIGUSR1) after step" "$out/usr1.log" && ! grep -q "corrupted\|Aborted" "$out/usr1.log" ||
  fail "SIGUSR1 to both ranks mid-step: exit $rc: $(grep -m2 'zt-train\|corrupted' "$out/usr1.log")"
[ $status -eq 0 ] && echo "SIGUSR1 to both ranks mid-step: $(grep -o 'preempted (SIGUSR1) after step [0-9]*' "$out/usr1.log"), exit 4"

exit $status
