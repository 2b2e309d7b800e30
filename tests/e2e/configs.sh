#!/usr/bin/env bash
# Every ready config under configs/ (the demo, GPT-2 124M at each stage, bf16 + stage 3 +
# activation checkpointing + checkpoint saves, optimizer offload to cpu, offload to nvme,
# fine-tuning from imported weights) loads: `zt-train --dry-run` prints its memory plan on 2
# ranks as written. Then each trains 2 steps through `zt-run -np 2` with only the size of the job
# overridden (the model shrunk to gpt2-tiny, seq_len 32; output, nvme_path and init_from
# pointed at a scratch directory), so what the config combines (stage, dtype, offload tier,
# activation and checkpoint settings, init_from) runs. The fine-tuning config starts from the
# weights the demo config's run saved. The Llama pair keeps its own model (a tiny one already):
# the pre-training config saves a Hugging Face directory, which the fine-tuning and LoRA configs
# then plan from and train from, on the corpus here (tests/e2e/llama_finetune.sh runs it on
# instruction data). Usage: configs.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun or without
# the corpus (the configs train on it).
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/nvme"  # nvme_path must exist (the configs name /tmp/zt-nvme)
cd "$src"
failed=0
fail() { echo "FAIL $name: $*"; failed=1; }

configs=(configs/gpt2-tiny.json configs/gpt2-124M.json configs/gpt2-124M-stage1.json
         configs/gpt2-124M-stage2.json configs/gpt2-124M-stage3.json
         configs/gpt2-124M-bf16-stage3-checkpointing.json configs/gpt2-124M-offload-cpu.json
         configs/gpt2-124M-offload-nvme.json configs/gpt2-124M-finetune.json
         configs/llama-tiny-pretrain.json configs/llama-tiny-finetune.json
         configs/llama-tiny-lora.json)
for file in configs/*.json; do
  printf '%s\n' "${configs[@]}" | grep -qx "$file" || { name=$file; fail "not in this test's list"; }
done

# What each config must show it combines, as a pattern over its own text.
declare -A expects=(
  [gpt2-124M-stage1]='"stage": 1' [gpt2-124M-stage2]='"stage": 2' [gpt2-124M-stage3]='"stage": 3'
  [gpt2-124M-bf16-stage3-checkpointing]='"activation_checkpointing"'
  [gpt2-124M-offload-cpu]='"device": "cpu"' [gpt2-124M-offload-nvme]='"device": "nvme"'
  [gpt2-124M-finetune]='"init_from"' [llama-tiny-pretrain]='"model_type": "llama"'
  [llama-tiny-finetune]='"activation_checkpointing"' [llama-tiny-lora]='"lora"')

for file in "${configs[@]}"; do
  name=$(basename "$file" .json)
  [ -z "${expects[$name]:-}" ] || grep -q "${expects[$name]}" "$file" ||
    fail "does not contain ${expects[$name]}"
  # What the plan needs (the fine-tuning config's model directory), and the size of the run.
  plan=() size=(--set zt.model=gpt2-tiny) as=gpt2-tiny
  case $name in
    llama-tiny-pretrain) size=(--set zt.save_pretrained.dir="$tmp/llama-base") as="its tiny Llama" ;;
    llama-tiny-finetune) plan=(--set zt.init_from="$tmp/llama-base")
                         size=(--set zt.train_data=data/corpus/train.bin --set zt.val_data=data/corpus/val.bin
                               --set zt.save_pretrained.dir="$tmp/llama-finetuned")
                         as="the Llama from llama-tiny-pretrain's directory" ;;
    llama-tiny-lora) plan=(--set zt.init_from="$tmp/llama-base")
                     size=(--set zt.train_data=data/corpus/train.bin --set zt.val_data=data/corpus/val.bin
                           --set zt.save_adapter="$tmp/llama-adapter"
                           --set zt.save_pretrained.dir="$tmp/llama-lora-merged")
                     as="LoRA adapters on the Llama from llama-tiny-pretrain's directory" ;;
  esac
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config "$file" --dry-run "${plan[@]}" \
    > "$tmp/$name.plan" 2> "$tmp/$name.err" || {
    fail "--dry-run exit $?:"; sed 's/^/    /' "$tmp/$name.err"; continue; }
  grep -q '[0-9]' "$tmp/$name.plan" || { fail "--dry-run printed no plan"; continue; }

  extra=()
  [ "$name" = gpt2-tiny ] && extra=(--set zt.save_weights="$tmp/tiny.safetensors")
  [ "$name" = gpt2-124M-finetune ] && extra=(--set zt.init_from="$tmp/tiny.safetensors"
                                             --set zt.save_weights="$tmp/finetuned.safetensors")
  grep -q nvme_path "$file" && extra=(--set zero_optimization.offload_optimizer.nvme_path="$tmp/nvme"
                                       --set zero_optimization.offload_param.nvme_path="$tmp/nvme")
  start=$(date +%s.%N)
  timeout 300 "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config "$file" \
    "${plan[@]}" "${size[@]}" --set zt.seq_len=32 --set zt.steps=2 --set zt.eval_every=0 \
    --set zt.output_dir="$tmp/$name" "${extra[@]}" > "$tmp/$name.out" 2> "$tmp/$name.err"
  rc=$?
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -ne 0 ] || ! grep -q '"step":2,' "$tmp/$name/metrics.jsonl" 2> /dev/null; then
    fail "did not train 2 steps (exit $rc):"; sed 's/^/    /' "$tmp/$name.err" | tail -8; continue
  fi
  if grep -qi 'unknown key' "$tmp/$name.out" "$tmp/$name.err"; then fail "unknown key"; fi
  [ "$name" = gpt2-124M-finetune ] && ! [ -s "$tmp/finetuned.safetensors" ] && fail "no fine-tuned weights saved"
  [ "$name" = llama-tiny-finetune ] && ! [ -s "$tmp/llama-finetuned/config.json" ] && fail "no directory saved"
  [ "$name" = llama-tiny-lora ] && ! [ -s "$tmp/llama-adapter/adapter_model.safetensors" ] &&
    fail "no adapter saved"
  [ "$name" = llama-tiny-lora ] && ! [ -s "$tmp/llama-lora-merged/config.json" ] &&
    fail "no merged directory saved"
  echo "ok   $name: plan for 2 ranks; trained 2 steps as $as in ${seconds}s" \
       "($(head -1 "$tmp/$name.plan" | cut -c1-70))"
done
[ "$failed" -eq 0 ] && echo "every config under configs/ loads and trains"
exit "$failed"
