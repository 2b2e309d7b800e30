#!/usr/bin/env bash
# The fine-tuning job, end to end on a tiny Llama, 2 ranks (after scripts/demo.sh or
# scripts/test.sh have built the tools and fetched the corpus; BIN=build/bin by default):
#   1. GPT-2's tokenizer as a Hugging Face tokenizer.json (scripts/gpt2_tokenizer_json.sh);
#   2. pre-train the tiny Llama of configs/llama-tiny-pretrain.json on the corpus and save it as
#      a Hugging Face directory, runs/llama-tiny-base (bf16), the tokenizer beside it;
#   3. synthetic instruction data: 4096 + 256 examples "Add 23 and 45.\nAnswer:" -> " sixty-
#      eight" (scripts/sums_jsonl.sh), packed by zt-prep into blocks of 64 tokens with a loss
#      mask on the completions (data/sums/);
#   4. fine-tune from the directory with configs/llama-tiny-finetune.json (bf16, ZeRO stage 3,
#      activation checkpointing, a checkpoint every 50 steps), the validation loss being the
#      completion tokens' only, and export runs/llama-tiny-sums/hf; then the same task with LoRA
#      (configs/llama-tiny-lora.json: r=16 on every linear layer, the embedding trained whole),
#      its PEFT adapter in runs/llama-tiny-sums-lora/adapter and the merged model in
#      runs/llama-tiny-sums-lora/hf;
#   5. what the model learned: zt-generate answers 200 held-out examples (sums none of the
#      training examples asks) greedily, with the base model, the fine-tuned one and the LoRA
#      one, and prints the exact-match accuracy of each
#      (runs/llama-tiny-sums/answers-{base,tuned,lora}.json);
#   6. the fine-tuning's curves drawn by zt-plot into runs/llama-tiny-sums/metrics.png.
# Extra arguments go to the fine-tuning zt-train (e.g. --set zt.steps=100). To resume an
# interrupted fine-tuning: the same zt-train command with --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build/bin}
run() { "$bin/zt-run" -np "${ZT_RANKS:-2}" --cpu -- "$bin/zt-train" "$@"; }
bash scripts/gpt2_tokenizer_json.sh data/gpt2 data/gpt2-tokenizer
if [ ! -f runs/llama-tiny-base/config.json ]; then
  run --config configs/llama-tiny-pretrain.json
  cp data/gpt2-tokenizer/tokenizer.json data/gpt2-tokenizer/tokenizer_config.json runs/llama-tiny-base/
fi
mkdir -p data/sums
bash scripts/sums_jsonl.sh 4096 1 > data/sums/train.jsonl
bash scripts/sums_jsonl.sh 256 2 > data/sums/val.jsonl
"$bin/zt-prep" --tokenizer runs/llama-tiny-base --seq-len 64 --out data/sums/train.bin data/sums/train.jsonl
"$bin/zt-prep" --tokenizer runs/llama-tiny-base --seq-len 64 --out data/sums/val.bin data/sums/val.jsonl
run --config configs/llama-tiny-finetune.json "$@"
run --config configs/llama-tiny-lora.json "$@"
# 5. held-out sums: lines of another seed that are not training lines, the first 200
bash scripts/sums_jsonl.sh 1000 3 | grep -vxFf data/sums/train.jsonl | awk 'NR <= 200' > data/sums/heldout.jsonl
for which in base tuned lora; do
  model=runs/llama-tiny-base
  [ "$which" = tuned ] && model=runs/llama-tiny-sums/hf
  [ "$which" = lora ] && model=runs/llama-tiny-sums-lora/hf
  echo "== $which model ($model): greedy answers to data/sums/heldout.jsonl"
  "$bin/zt-generate" --model "$model" --prompts data/sums/heldout.jsonl --max-new-tokens 12 \
    --json "runs/llama-tiny-sums/answers-$which.json" > /dev/null
done
"$bin/zt-plot" runs/llama-tiny-sums
