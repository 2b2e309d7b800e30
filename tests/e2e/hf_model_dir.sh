#!/usr/bin/env bash
# Hugging Face model directories through zt-train (gpt2-tiny, 2 ranks, stage 3):
#   - zt.save_pretrained {dir, dtype, max_shard_size} writes config.json, an index and its
#     shards (and copies the tokenizer files of the directory trained from);
#   - a config without zt.model takes the model from zt.init_from's config.json, and trains from
#     the directory to the same first loss, bit for bit, as from the same weights in one file;
#   - a zt.model disagreeing with config.json, and a zt.model left out without a model
#     directory, are refused naming the key.
# Usage: hf_model_dir.sh BIN_DIR SOURCE_DIR
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
train() {  # NAME CONFIG ARGS...
  local name=$1 config=$2
  shift 2
  "$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" --config "$config" --set zt.seq_len=32 \
    --set zt.eval_every=0 --set scheduler.params.total_num_steps=4 \
    --set zero_optimization.stage=3 --set zt.output_dir="$tmp/$name" "$@" \
    > "$tmp/$name.out" 2> "$tmp/$name.err"
}
first_loss() { grep -o '"step":1,"loss":[^,]*' "$tmp/$1/metrics.jsonl"; }

train save configs/gpt2-tiny.json --set zt.steps=2 --set zt.save_weights="$tmp/weights.safetensors" \
  --set 'zt.save_pretrained={"dir":"'"$tmp"'/hf","max_shard_size":"8MB"}' ||
  { fail "save_pretrained: $(tail -2 "$tmp/save.err")"; exit 1; }
echo "$(grep -m1 'saved a Hugging Face model directory' "$tmp/save.out" | sed "s|$tmp/||")"
shards=$(ls "$tmp/hf" | grep -c '^model-0000[0-9]-of-0000[0-9].safetensors$')
[ -f "$tmp/hf/config.json" ] && [ -f "$tmp/hf/model.safetensors.index.json" ] && [ "$shards" -ge 2 ] ||
  fail "the directory holds $(ls "$tmp/hf" | tr '\n' ' ')"
grep -q '"model_type": "gpt2"' "$tmp/hf/config.json" || fail "config.json has no model_type gpt2"

# The model from config.json: the config gives no zt.model.
grep -v '"model":' configs/gpt2-tiny.json > "$tmp/no_model.json"
train from_dir "$tmp/no_model.json" --set zt.steps=1 --set zt.init_from="$tmp/hf" ||
  fail "training from the directory without zt.model: $(tail -2 "$tmp/from_dir.err")"
train from_file configs/gpt2-tiny.json --set zt.steps=1 --set zt.init_from="$tmp/weights.safetensors" ||
  fail "training from the weights file: $(tail -2 "$tmp/from_file.err")"
a=$(first_loss from_dir) b=$(first_loss from_file)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "from the directory and from the file: $a (bitwise)" ||
  fail "first losses differ: directory '$a', file '$b'"

train mismatch configs/gpt2-tiny.json --set zt.steps=1 --set zt.init_from="$tmp/hf" --set zt.model=gpt2-124M
line=$(grep -m1 "'zt.model' has" "$tmp/mismatch.err")
[ -n "$line" ] && echo "refused: ${line:0:150}" || fail "a zt.model unlike config.json was not refused: $(tail -1 "$tmp/mismatch.err")"
train no_model "$tmp/no_model.json" --set zt.steps=1 --set zt.init_from="$tmp/weights.safetensors"
line=$(grep -m1 "'zt.model' is missing" "$tmp/no_model.err")
[ -n "$line" ] && echo "refused: ${line:0:150}" || fail "no zt.model and no model directory was not refused: $(tail -1 "$tmp/no_model.err")"
[ "$failed" -eq 0 ] && echo "Hugging Face model directories: written sharded, trained from bitwise, mismatches refused"
exit "$failed"
