#!/usr/bin/env bash
# The README's main job, shortened: zt-train on the real corpus with the tiny GPT-2 on 2 ranks
# (ZeRO stage 2, from configs/gpt2-tiny.json) lowers validation loss by at least 1.0 nat.
# Usage: train_tiny.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -eu
bin=$1 src=$2
steps=${ZT_E2E_STEPS:-40}
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json --set zt.output_dir="$out" \
  --set zt.steps="$steps" --set zt.eval_every="$steps" \
  --set scheduler.params.total_num_steps="$steps"
vals=$(grep -o '"val_loss":[-0-9.eE+]*' "$out/metrics.jsonl" | cut -d: -f2)
first=$(echo "$vals" | head -n 1)
last=$(echo "$vals" | tail -n 1)
echo "validation loss: $first -> $last"
awk -v a="$first" -v b="$last" 'BEGIN { if (a - b >= 1.0) { print "dropped by " a - b " nats"; exit 0 }
                                        print "dropped by only " a - b " nats"; exit 1 }'
