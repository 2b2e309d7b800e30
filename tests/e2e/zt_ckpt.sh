#!/usr/bin/env bash
# zt-ckpt end to end on configs/gpt2-tiny.json (T=32, 2 rows per rank and micro-batch, a global
# batch of 8 rows):
#   - a 2-rank ZeRO stage 2 run of 3 steps saving a checkpoint and zt.save_weights: zt-ckpt
#     consolidate of the checkpoint is the weights file, byte for byte; zt-ckpt inspect passes;
#   - consolidate -> import -> consolidate gives the same bytes again;
#   - zt-train --resume from the import (on 2 ranks, stage 1; imported with the run's config, so
#     no note but the data position's) trains 3 steps with the losses,
#     gradient norms, learning rates and final weights of a run started with zt.init_from= the
#     same file, bit for bit (both: those weights, a fresh optimizer, step 1, data position 0);
#   - python's json and struct read the consolidated file (when python3 is there);
#   - one flipped byte in rank1.zts: inspect and consolidate exit 2 with one line naming it.
# Usage: zt_ckpt.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
status=0
fail() { echo "FAIL: $*"; status=1; }
job=(--set zt.eval_every=0 --set zt.seq_len=32 --set train_micro_batch_size_per_gpu=2
     --set train_batch_size=8 --set gradient_accumulation_steps=null
     --set scheduler.params.total_num_steps=8)
# name, ranks, extra arguments; zt-train's exit code. Every run writes its log to $out/name.log.
train() {
  local name=$1 ranks=$2
  shift 2
  mpirun --oversubscribe -np "$ranks" "$bin/zt-train" --config configs/gpt2-tiny.json "${job[@]}" \
    --set zt.output_dir="$out/$name" "$@" > "$out/$name.log" 2>&1
}
ckpt() { "$bin/zt-ckpt" "$@" > "$out/ckpt.log" 2>&1; }
rows() { grep -o '"step":[^,]*,"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$out/$1/metrics.jsonl"; }

# ---- consolidate = zt.save_weights of the same run ------------------------------------------
train trained 2 --set zero_optimization.stage=2 --set zt.steps=3 \
  --set 'zt.checkpoint={"every_n_steps":3}' --set zt.save_weights="$out/trained.safetensors" ||
  fail "training: $(tail -n 3 "$out/trained.log")"
ck="$out/trained/checkpoints"
ckpt inspect "$ck" || fail "inspect: $(tail -n 3 "$out/ckpt.log")"
grep -q "^ok: 2 shard files" "$out/ckpt.log" || fail "inspect did not verify: $(tail -n 2 "$out/ckpt.log")"
ckpt consolidate "$ck" "$out/consolidated.safetensors" || fail "consolidate: $(tail -n 3 "$out/ckpt.log")"
grep -q "^memory: peak RSS" "$out/ckpt.log" || fail "no memory line: $(cat "$out/ckpt.log")"
cmp -s "$out/consolidated.safetensors" "$out/trained.safetensors" ||
  fail "the consolidated checkpoint differs from zt.save_weights' file"
[ $status -eq 0 ] && echo "consolidate: 2-rank stage 2 checkpoint = zt.save_weights' file, byte for byte; inspect verified every checksum"

# ---- consolidate -> import -> consolidate ---------------------------------------------------------
imp=(--config configs/gpt2-tiny.json "${job[@]}")
ckpt import "$out/consolidated.safetensors" "$out/imported" "${imp[@]}" ||
  fail "import: $(tail -n 3 "$out/ckpt.log")"
ckpt consolidate "$out/imported" "$out/again.safetensors" || fail "consolidate the import: $(tail -n 3 "$out/ckpt.log")"
cmp -s "$out/again.safetensors" "$out/consolidated.safetensors" ||
  fail "consolidate -> import -> consolidate changed the bytes"
[ $status -eq 0 ] && echo "round trip: consolidate -> import -> consolidate, byte for byte"

# ---- fine-tuning from the import ------------------------------------------------------------
s1="--set zero_optimization.stage=1"
train init 2 $s1 --set zt.steps=3 --set zt.init_from="$out/consolidated.safetensors" \
  --set zt.save_weights="$out/init.safetensors" || fail "init_from run: $(tail -n 3 "$out/init.log")"
train tuned 2 $s1 --set zt.steps=3 --set zt.save_weights="$out/tuned.safetensors" \
  --resume "$out/imported" || fail "--resume from the import: $(tail -n 3 "$out/tuned.log")"
grep -q "^resumed from $out/imported/step0: step 0 of a ZeRO stage 0 fp32 run on 1 rank; training steps 1 to 3" "$out/tuned.log" ||
  fail "no 'resumed from' line: $(grep -m1 resumed "$out/tuned.log")"
# The data position (0) is mapped from the import's one rank to these two; nothing else differs.
if grep "^note: the checkpoint" "$out/tuned.log" | grep -vq "data position (batch 0 of 1 rank"; then
  fail "resume notes for an import made with the run's own config: $(grep '^note: the checkpoint' "$out/tuned.log")"
fi
[ "$(rows tuned | wc -l)" = 3 ] && [ "$(rows tuned)" = "$(rows init)" ] ||
  fail "metrics differ: init_from $(rows init | tr '\n' ' ') vs resumed $(rows tuned | tr '\n' ' ')"
cmp -s "$out/tuned.safetensors" "$out/init.safetensors" || fail "weights differ after 3 steps"
[ $status -eq 0 ] && echo "fine-tuning: --resume from the import = zt.init_from the same file (3 steps: losses, norms, lrs, weights bitwise)"

# ---- any reader: python's json and struct ------------------------------------------------------
if command -v python3 > /dev/null; then
  python3 - "$out/consolidated.safetensors" > "$out/python.log" 2>&1 <<'EOF' || fail "python: $(tail -n 3 "$out/python.log")"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', b[:8])
assert (8 + n) % 8 == 0
h = json.loads(b[8:8 + n])
h.pop('__metadata__', None)
end = 0
for v in sorted(h.values(), key=lambda v: v['data_offsets']):
    s, e = v['data_offsets']
    count = 1
    for d in v['shape']:
        count *= d
    assert s == end and e - s == 4 * count and v['dtype'] == 'F32', v
    end = e
assert 8 + n + end == len(b)
assert h['wte.weight']['shape'] == [50257, 128], h['wte.weight']['shape']
print(len(h), 'tensors')
EOF
  [ $status -eq 0 ] && echo "python's json/struct read it: $(cat "$out/python.log")"
fi

# ---- a damaged checkpoint -----------------------------------------------------------------------
shard="$ck/step3/rank1.zts"
byte=$(dd if="$shard" bs=1 skip=1000 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "\\x$(printf %02x $(((byte + 1) % 256)))" | dd of="$shard" bs=1 seek=1000 conv=notrunc 2>/dev/null
for command in "inspect $ck" "consolidate $ck $out/bad.safetensors"; do
  # shellcheck disable=SC2086
  ckpt $command
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l < "$out/ckpt.log")" = 1 ] && grep -q "^zt-ckpt: checkpoint $shard: fails its checksum" "$out/ckpt.log" ||
    fail "zt-ckpt $command on a flipped byte: exit $rc, $(cat "$out/ckpt.log")"
done
[ -e "$out/bad.safetensors" ] && fail "consolidate of a damaged checkpoint left a file"
[ $status -eq 0 ] && echo "damaged: a flipped byte in rank1.zts, inspect and consolidate exit 2 naming the file"
exit $status
