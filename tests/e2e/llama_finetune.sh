#!/usr/bin/env bash
# The fine-tuning job end to end on a tiny Llama (configs/llama-tiny-pretrain.json's shape: GQA,
# tied head, GPT-2's vocabulary through a tokenizer.json), 2 ranks:
#   - pre-train it on the corpus a few steps and save it as a Hugging Face directory (bf16), the
#     tokenizer files beside it;
#   - zt-prep turns synthetic instruction examples (scripts/sums_jsonl.sh: two numbers in the
#     prompt, their sum in words as the completion) into packed token files with a loss mask;
#   - configs/llama-tiny-finetune.json (bf16, stage 3, activation checkpointing, checkpoints)
#     from that directory at stages 0, 1, 2 and 3: the same losses and the same exported
#     safetensors, bit for bit;
#   - a run stopped after its checkpoint and resumed (--resume) ends with the losses and the
#     export of a straight run, bit for bit;
#   - the completion loss on the validation examples falls by more than 40% from the
#     pre-trained model's;
#   - the exported directory re-imported: its validation loss is the fine-tuned run's last one,
#     bit for bit, and exported again (one step at lr 0) it is the same bytes.
# Usage: llama_finetune.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun, the corpus or jq.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v jq > /dev/null || { echo "skip: no jq"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] && [ -f "$src/data/gpt2/encoder.json" ] ||
  { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
run() {  # NAME CONFIG ARGS...: zt-train on 2 ranks, its output in $tmp/NAME.{out,err}
  local name=$1 config=$2
  shift 2
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config "$config" \
    --set zt.output_dir="$tmp/$name" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}
losses() { jq -c 'select(.step != null and .loss != null) | [.step, .loss, .grad_norm]' "$tmp/$1/metrics.jsonl"; }
val_loss() { jq -r "select(.step == $2 and .val_loss != null) | .val_loss" "$tmp/$1/metrics.jsonl"; }

# Pre-training: 40 steps of the pretrain config, saved in bf16 with GPT-2's tokenizer beside it.
run base configs/llama-tiny-pretrain.json --set zt.steps=40 --set zt.eval_every=0 \
  --set zt.seq_len=32 --set scheduler.params.total_num_steps=40 \
  --set zt.save_pretrained.dir="$tmp/base" ||
  { fail "pre-training: $(tail -2 "$tmp/base.err")"; exit 1; }
bash scripts/gpt2_tokenizer_json.sh data/gpt2 "$tmp/base" || { fail "tokenizer.json"; exit 1; }
echo "pre-trained: $(grep -m1 'saved a Hugging Face' "$tmp/base.out" | sed "s|$tmp/||")"

# Instruction data: 512 training and 128 validation examples packed into blocks of 64 tokens.
mkdir "$tmp/sums"
bash scripts/sums_jsonl.sh 512 1 > "$tmp/sums/train.jsonl"
bash scripts/sums_jsonl.sh 128 2 > "$tmp/sums/val.jsonl"
for split in train val; do
  "$bin/zt-prep" --tokenizer "$tmp/base" --seq-len 64 --out "$tmp/sums/$split.bin" \
    "$tmp/sums/$split.jsonl" > "$tmp/prep_$split.out" 2> "$tmp/prep.err" ||
    { fail "zt-prep $split: $(cat "$tmp/prep.err")"; exit 1; }
  echo "zt-prep: $(sed "s|$tmp/||" "$tmp/prep_$split.out")"
done
data=(--set zt.train_data="$tmp/sums/train.bin" --set zt.val_data="$tmp/sums/val.bin"
      --set zt.init_from="$tmp/base" --set zt.checkpoint.dir="$tmp/ckpt")

# Stages 0-3 from the directory: 3 steps each, the same bits.
for stage in 0 1 2 3; do
  run "stage$stage" configs/llama-tiny-finetune.json "${data[@]}" --set zt.steps=3 \
    --set zt.eval_every=0 --set zero_optimization.stage=$stage \
    --set zt.checkpoint.dir="$tmp/ckpt_stage$stage" \
    --set zt.save_pretrained.dir="$tmp/stage$stage/hf" ||
    { fail "stage $stage: $(grep -m1 zt-train "$tmp/stage$stage.err")"; continue; }
  if [ "$stage" -gt 0 ]; then
    [ "$(losses stage$stage)" = "$(losses stage0)" ] || fail "stage $stage losses differ from stage 0's"
    cmp -s "$tmp/stage$stage/hf/model.safetensors" "$tmp/stage0/hf/model.safetensors" ||
      fail "stage $stage export differs from stage 0's"
  fi
done
[ "$failed" -eq 0 ] && echo "stages 0-3: the same losses ($(losses stage0 | tr '\n' ' ')) and exports, bitwise"

# The fine-tuning run as configured (80 steps here), straight; and stopped at its step-40
# checkpoint, then resumed.
ft=("${data[@]}" --set zt.steps=80 --set zt.eval_every=40 --set scheduler.params.total_num_steps=80
    --set zt.checkpoint.every_n_steps=40)
run straight configs/llama-tiny-finetune.json "${ft[@]}" --set zt.checkpoint.dir="$tmp/ckpt_straight" \
  --set zt.save_pretrained.dir="$tmp/straight/hf" ||
  { fail "fine-tuning: $(tail -2 "$tmp/straight.err")"; exit 1; }
run first_half configs/llama-tiny-finetune.json "${ft[@]}" --set zt.steps=40 \
  --set zt.checkpoint.dir="$tmp/ckpt_resumed" --set zt.save_pretrained.dir="$tmp/first_half/hf" ||
  fail "first half: $(tail -2 "$tmp/first_half.err")"
mv "$tmp/first_half" "$tmp/resumed"
run resumed configs/llama-tiny-finetune.json "${ft[@]}" --set zt.checkpoint.dir="$tmp/ckpt_resumed" \
  --set zt.save_pretrained.dir="$tmp/resumed/hf" --resume ||
  fail "resume: $(tail -2 "$tmp/resumed.err")"
[ "$(losses resumed)" = "$(losses straight)" ] && cmp -s "$tmp/resumed/hf/model.safetensors" "$tmp/straight/hf/model.safetensors" &&
  echo "resumed at step 40: the straight run's losses and export, bitwise" ||
  fail "the resumed run differs from the straight one"

first=$(val_loss straight 0) last=$(val_loss straight 80)
echo "completion loss on the validation examples: $first before, $last after 80 steps"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b < 0.6 * a) }' ||
  fail "the completion loss did not fall by 40%: $first -> $last"
targets=$(jq -r 'select(.step == 1) | .loss_targets' "$tmp/straight/metrics.jsonl")
echo "step 1 trained on $targets completion targets of $((2 * 8 * 64)) positions"
[ -n "$targets" ] && [ "$targets" -gt 0 ] && [ "$targets" -lt $((2 * 8 * 64 / 2)) ] ||
  fail "loss_targets '$targets' is not a minority of the positions"

# Re-import the export: step 0's validation loss is the fine-tuned one, and one step at lr 0
# exports the same bytes.
run again configs/llama-tiny-finetune.json "${data[@]}" --set zt.init_from="$tmp/straight/hf" \
  --set zt.steps=1 --set optimizer.params.lr=0 --set scheduler.params.warmup_max_lr=0 \
  --set zt.checkpoint.dir="$tmp/ckpt_again" --set zt.save_pretrained.dir="$tmp/again/hf" ||
  fail "re-import: $(tail -2 "$tmp/again.err")"
[ "$(val_loss again 0)" = "$last" ] && echo "re-imported: validation loss $last, bitwise" ||
  fail "re-imported validation loss $(val_loss again 0), fine-tuned $last"
cmp -s "$tmp/again/hf/model.safetensors" "$tmp/straight/hf/model.safetensors" &&
  echo "exported again: the same bytes" || fail "the second export differs"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$tmp/straight/hf/$f" "$tmp/base/$f" || fail "$f was not carried into the export"
done
[ "$failed" -eq 0 ] && echo "Llama fine-tuning: stages bitwise, resume bitwise, completion loss down, round trip bitwise"
exit "$failed"
