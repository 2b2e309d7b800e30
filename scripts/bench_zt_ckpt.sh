#!/usr/bin/env bash
# zt-ckpt on GPT-2 124M: trains one step (configs/gpt2-124M.json, one rank, B=1, T=32) with a
# checkpoint, then consolidates it to fp32 and bf16 and prints zt-ckpt's memory line (peak RSS
# against the largest unit: the root, wte + wpe + ln_f, 157 MB in fp32), imports the fp32 file
# and inspects the import. Prints the CPU. Needs the corpus (scripts/fetch_data.sh) and about
# 3 GB of disk; takes a minute or two on a few cores.
# Usage: scripts/bench_zt_ckpt.sh [BUILD_DIR (default build)]
set -eu
bin=${1:-build}/bin
cd "$(dirname "$0")/.."
[ -f data/corpus/train.bin ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_WAIT_POLICY=PASSIVE
grep -m1 "model name" /proc/cpuinfo
"$bin/zt-train" --config configs/gpt2-124M.json --set zt.steps=1 --set zt.eval_every=0 \
  --set train_micro_batch_size_per_gpu=1 --set zt.seq_len=32 --set zt.output_dir="$out/run" \
  --set 'zt.checkpoint={"every_n_steps":1}' > "$out/train.log" 2>&1 ||
  { tail -n 5 "$out/train.log"; exit 1; }
grep "saved checkpoint" "$out/train.log"
for dtype in fp32 bf16; do
  /usr/bin/time -f "zt-ckpt consolidate --dtype $dtype: %e s, max RSS %M KiB (time -f %%M)" \
    "$bin/zt-ckpt" consolidate "$out/run/checkpoints" "$out/gpt2-124M.$dtype.safetensors" --dtype "$dtype"
done
/usr/bin/time -f "zt-ckpt import: %e s, max RSS %M KiB" \
  "$bin/zt-ckpt" import "$out/gpt2-124M.fp32.safetensors" "$out/imported" --config configs/gpt2-124M.json
"$bin/zt-ckpt" inspect "$out/imported" | tail -n 1
