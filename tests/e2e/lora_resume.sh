#!/usr/bin/env bash
# LoRA through zt-train on the tiny Llama of configs/llama-tiny-pretrain.json (GQA, tied head), 2
# ranks, bf16, ZeRO stage 3, adapters on every linear layer with dropout 0.1:
#   - the start-up line says what trains (the adapters' share of the parameters);
#   - exact resume: 6 steps straight vs 3 steps, a checkpoint and --resume for steps 4-6: the same
#     losses and gradient norms, bit for bit (the dropout masks follow the step, not the process);
#   - the checkpoint holds the adapters and their optimizer state, not the frozen base, and
#     records the base's fingerprint: resumed on another base (another seed initialises it) it is
#     refused before any step, naming the manifest, exit 2;
#   - a target that names no linear layer is refused naming the config, exit 2.
# Usage: lora_resume.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun, jq or the corpus.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v jq > /dev/null || { echo "skip: no jq"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
lora='{"r":4,"lora_alpha":8,"lora_dropout":0.1,"target_modules":"all-linear"}'
run() {  # NAME ARGS...: zt-train on 2 ranks, its output in $tmp/NAME.{out,err}
  local name=$1
  shift
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config configs/llama-tiny-pretrain.json \
    --set zt.output_dir="$tmp/$name" --set zt.eval_every=0 --set zt.seq_len=32 \
    --set train_micro_batch_size_per_gpu=4 --set zero_optimization.stage=3 \
    --set 'bf16={"enabled":true}' --set scheduler.params.total_num_steps=6 \
    --set zt.save_pretrained=null --set "zt.lora=$lora" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}
losses() { jq -c 'select(.step != null and .loss != null) | [.step, .loss, .grad_norm]' "$tmp/$1/metrics.jsonl"; }

run straight --set zt.steps=6 || fail "straight: $(tail -2 "$tmp/straight.err")"
line=$(grep -m1 '^trainable:' "$tmp/straight.out")
echo "$line"
[[ $line == *"LoRA r=4 alpha=8 dropout=0.1 on all-linear"* ]] || fail "no 'trainable:' line: $line"
run resume --set zt.steps=3 --set 'zt.checkpoint={"every_n_steps":3}' ||
  fail "3 steps: $(tail -2 "$tmp/resume.err")"
ckpt="$tmp/resume/checkpoints/step3"
# The checkpoint: adapters (model.layers.N units) and no frozen unit; the base's fingerprint.
jq -e '[.units[].name] | all(endswith(".frozen") | not) and (index("root") == null)' \
  "$ckpt/manifest.json" > /dev/null || fail "the checkpoint holds frozen units: $(jq -c '[.units[].name]' "$ckpt/manifest.json")"
jq -e '.trainer_state.engine.frozen_base["model.layers.0.frozen"] | startswith("init ")' \
  "$ckpt/manifest.json" > /dev/null || fail "no frozen_base fingerprint in the manifest"
cp -r "$tmp/resume" "$tmp/other"
run resume --set zt.steps=6 --resume || fail "--resume: $(tail -2 "$tmp/resume.err")"
[ "$(losses straight)" = "$(losses resume)" ] && [ "$(losses straight | wc -l)" = 6 ] ||
  fail "resumed losses differ: $(diff <(losses straight) <(losses resume) | head -4)"

# Another base: a run seeded otherwise initialises another frozen base.
run other --set zt.steps=6 --set zt.seed=7 --resume
code=$?
err=$(grep -m1 'another base' "$tmp/other.err")
[ "$code" = 2 ] && [[ $err == *"$tmp/other/checkpoints/step3/manifest.json"* ]] ||
  fail "another base: exit $code, $(tail -1 "$tmp/other.err")"
echo "refused: ${err##*zt-train: }" | sed "s|$tmp/||g"

run bad --set zt.steps=1 --set 'zt.lora={"target_modules":["q_proj","c_attn"]}'
code=$?
err=$(grep -m1 'zt-train:' "$tmp/bad.err")
[ "$code" = 2 ] && [[ $err == *"configs/llama-tiny-pretrain.json"*"'c_attn' names no linear layer"* ]] ||
  fail "an unknown target: exit $code, $err"
[ "$failed" = 0 ] && echo "PASS"
exit "$failed"
