#!/usr/bin/env bash
# Mixed precision tracks fp32 on the real corpus: configs/gpt2-tiny.json (2 ranks, ZeRO stage 2)
# trained for 300 steps in fp32, in bf16 and in fp16 with dynamic loss scaling; the final
# validation loss of each 16-bit run is within 3% of the fp32 run's. Also checks the fp16 run
# logged its loss scale on every step.
# Usage: mixed_precision.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -eu
bin=$1 src=$2
steps=${ZT_MIXED_STEPS:-300}
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train() {  # name, extra --set arguments
  local name=$1
  shift
  mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps="$steps" --set zt.eval_every="$steps" \
    --set scheduler.params.total_num_steps="$steps" --set steps_per_print=100 "$@"
}
last_val() { grep -o '"val_loss":[-0-9.eE+]*' "$out/$1/metrics.jsonl" | tail -n 1 | cut -d: -f2; }
train fp32
train bf16 --set bf16.enabled=true
train fp16 --set fp16.enabled=true
scaled=$(grep '"step":' "$out/fp16/metrics.jsonl" | grep -c '"loss_scale":')
[ "$scaled" -eq "$steps" ] || { echo "fp16 metrics: $scaled of $steps steps carry loss_scale"; exit 1; }
skipped=$(grep -c '"skipped":true' "$out/fp16/metrics.jsonl" || true)
fp32=$(last_val fp32)
status=0
for name in bf16 fp16; do
  v=$(last_val "$name")
  awk -v a="$fp32" -v b="$v" -v n="$name" 'BEGIN {
    d = (b - a) / a; if (d < 0) d = -d
    printf "%s: validation loss %.4f vs fp32 %.4f: %.2f%% apart\n", n, b, a, 100 * d
    exit d <= 0.03 ? 0 : 1 }' || status=1
done
echo "fp16: $skipped of $steps steps skipped on overflow"
exit $status
