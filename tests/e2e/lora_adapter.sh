#!/usr/bin/env bash
# LoRA's files through zt-train, on a tiny Llama read from a Hugging Face directory (2 ranks):
#   - a run with zt.lora writes PEFT's adapter directory (zt.save_adapter: adapter_config.json,
#     adapter_model.safetensors with PEFT's tensor names) and the merged model
#     (zt.save_pretrained with merge_adapter);
#   - a second run, its zt.lora read from that adapter_config.json and its adapters from the
#     directory (zt.init_adapter), at another ZeRO stage, evaluates before its first step to the
#     first run's final validation loss, bit for bit;
#   - the merged directory, trained from without LoRA, evaluates to it within 1e-5 relative;
#   - an adapter of another rank, and save_pretrained without merge_adapter under zt.lora, are
#     refused before training, one line naming the file or the key.
# Usage: lora_adapter.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun or jq.
set -u
bin=$1
source "$(dirname "$0")/lib/token_files.bash"
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v jq > /dev/null || { echo "skip: no jq"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

tokens=()
for i in $(seq 0 2999); do tokens+=($(( (i * 7 + i / 13 + (i * i) % 11) % 120 ))); done
write_tokens "$tmp/train.bin" 20240520 1 3000 "${tokens[@]}"
write_tokens "$tmp/val.bin" 20240520 1 600 "${tokens[@]:1000:600}"
cat > "$tmp/base.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
  "zero_optimization": {"stage": 2},
  "zt": {"model": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "vocab_size": 128, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
                   "tie_word_embeddings": true},
         "seq_len": 16, "steps": 4, "train_data": "$tmp/train.bin", "val_data": "$tmp/val.bin",
         "eval_batches": 2, "save_pretrained": "$tmp/base"}
}
JSON
# The LoRA runs take the model from the directory: no zt.model.
jq 'del(.zt.model, .zt.save_pretrained)' "$tmp/base.json" > "$tmp/lora.json"
run() {  # NAME CONFIG ARGS...: zt-train on 2 ranks, output in $tmp/NAME.{out,err}
  local name=$1 config=$2
  shift 2
  timeout 120 "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config "$config" \
    --set zt.output_dir="$tmp/$name" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}
val_loss() { jq -r "select(.step == $2 and .val_loss != null) | .val_loss" "$tmp/$1/metrics.jsonl"; }

run base "$tmp/base.json" || { fail "the base model: $(tail -2 "$tmp/base.err")"; exit 1; }
targets='["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'
run adapted "$tmp/lora.json" --set zt.init_from="$tmp/base" --set zt.steps=6 --set zt.eval_every=6 \
  --set zero_optimization.stage=3 --set "zt.lora={\"r\":4,\"lora_alpha\":8,\"target_modules\":$targets}" \
  --set zt.save_adapter="$tmp/adapter" \
  --set "zt.save_pretrained={\"dir\":\"$tmp/merged\",\"merge_adapter\":true}" ||
  { fail "the LoRA run: $(tail -2 "$tmp/adapted.err")"; exit 1; }
grep -m1 'saved LoRA adapters' "$tmp/adapted.out" | sed "s|$tmp/||g"
grep -m1 'saved a Hugging Face' "$tmp/adapted.out" | sed "s|$tmp/||g"
config="$tmp/adapter/adapter_config.json"
[ "$(jq -c '[.peft_type, .task_type, .r, .lora_alpha, .bias, .inference_mode, .target_modules]' "$config")" = \
  '["LORA","CAUSAL_LM",4,8,"none",true,["down_proj","gate_proj","k_proj","o_proj","q_proj","up_proj","v_proj"]]' ] ||
  fail "adapter_config.json: $(jq -c . "$config")"
for name in model.layers.0.self_attn.q_proj.lora_A.weight model.layers.1.mlp.down_proj.lora_B.weight; do
  grep -q -a "\"base_model.model.$name\"" "$tmp/adapter/adapter_model.safetensors" ||
    fail "adapter_model.safetensors has no base_model.model.$name"
done
if grep -q -a 'lora_' "$tmp/merged/model.safetensors"; then fail "the merged model holds adapter tensors"; fi
first=$(val_loss adapted 0) last=$(val_loss adapted 6)
[ -n "$last" ] && [ "$first" != "$last" ] ||
  fail "the LoRA run's validation loss did not move: $first, then $last"

# Its zt.lora from the adapter's own adapter_config.json, its adapters from the directory.
run reloaded "$tmp/lora.json" --set zt.init_from="$tmp/base" --set zt.steps=1 \
  --set zero_optimization.stage=1 --set zt.lora="$tmp/adapter" --set zt.init_adapter="$tmp/adapter" ||
  fail "the run from the adapter: $(tail -2 "$tmp/reloaded.err")"
grep -m1 'loaded LoRA adapters' "$tmp/reloaded.out" | sed "s|$tmp/||g"
again=$(val_loss reloaded 0)
[ -n "$last" ] && [ "$again" = "$last" ] &&
  echo "from the adapter directory: validation loss $again, the LoRA run's last, bitwise" ||
  fail "validation loss from the adapter $again, the LoRA run's last $last"

run merged "$tmp/lora.json" --set zt.init_from="$tmp/merged" --set zt.steps=1 ||
  fail "the run from the merged model: $(tail -2 "$tmp/merged.err")"
merged=$(val_loss merged 0)
awk -v a="$merged" -v b="$last" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-5 * b) }' &&
  echo "the merged model without LoRA: validation loss $merged (adapted $last)" ||
  fail "the merged model's validation loss $merged, the adapted model's $last"

run other_r "$tmp/lora.json" --set zt.init_from="$tmp/base" --set zt.steps=1 \
  --set "zt.lora={\"r\":8,\"lora_alpha\":8,\"target_modules\":$targets}" --set zt.init_adapter="$tmp/adapter"
line=$(grep -m1 "adapter_config.json: r is 4, this run's zt.lora.r 8" "$tmp/other_r.err")
[ -n "$line" ] && echo "refused: ${line:0:150}" | sed "s|$tmp/||g" ||
  fail "an adapter of another rank was not refused: $(tail -1 "$tmp/other_r.err")"
run unmerged "$tmp/lora.json" --set zt.init_from="$tmp/base" --set zt.steps=1 \
  --set zt.lora="$tmp/adapter" --set zt.save_pretrained="$tmp/unmerged"
line=$(grep -m1 "merge_adapter' to true" "$tmp/unmerged.err")
[ -n "$line" ] && echo "refused: ${line:0:150}" | sed "s|$tmp/||g" ||
  fail "save_pretrained without merge_adapter under zt.lora was not refused: $(tail -1 "$tmp/unmerged.err")"
[ "$failed" -eq 0 ] && echo "LoRA adapter files: PEFT's directory written and read back bitwise, merged export equal"
exit "$failed"
