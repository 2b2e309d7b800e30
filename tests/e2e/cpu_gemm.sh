#!/usr/bin/env bash
# The CPU's 16-bit GEMM paths end to end (train/gemm_choice.h) on configs/gpt2-tiny.json in bf16,
# 2 ranks, T=32, each run with its own cache directory (XDG_CACHE_HOME):
#   - the first run measures and writes the cache, the second reads it: the same table in
#     metrics.jsonl's first row and bitwise-equal losses;
#   - a corrupt cache is ignored with one note and measured again;
#   - 2 steps, a checkpoint, then the cache edited to choose 'widened' everywhere: --resume keeps
#     the checkpoint's table, says so, and steps 3-4 have the straight run's losses bit for bit;
#   - ZT_CPU_GEMM=fast and zt.cpu_gemm=fast are one line each, exit 2; so is ZT_CPU_GEMM=native
#     in fp16 (oneDNN 2.6 has no native fp16 matmul), agreed by both ranks.
# Usage: cpu_gemm.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
export XDG_CACHE_HOME=$out/cache
status=0
fail() { echo "FAIL: $*"; status=1; }
train() {  # name, extra arguments; every run logs to $out/name.log
  local name=$1
  shift
  mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set bf16.enabled=true --set zt.eval_every=0 --set zt.seq_len=32 \
    --set train_micro_batch_size_per_gpu=2 --set train_batch_size=4 \
    --set gradient_accumulation_steps=null --set zt.output_dir="$out/$name" "$@" \
    > "$out/$name.log" 2>&1
}
table() { head -1 "$out/$1/metrics.jsonl"; }
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$out/$1/metrics.jsonl"; }

train first --set zt.steps=4 || fail "first run: $(tail -n 3 "$out/first.log")"
grep -q 'cpu GEMM paths: .* measured, cache' "$out/first.log" || fail "the first run did not measure"
table first | grep -q '"cpu_gemm":"fwd ' || fail "no GEMM table in the first row: $(table first)"
train second --set zt.steps=4 || fail "second run: $(tail -n 3 "$out/second.log")"
grep -q 'cpu GEMM paths: .* from cache' "$out/second.log" || fail "the second run did not use the cache"
[ "$(table first)" = "$(table second)" ] || fail "tables differ: $(table first) vs $(table second)"
[ "$(losses first)" = "$(losses second)" ] && [ "$(losses first | wc -l)" = 4 ] ||
  fail "losses differ: $(losses first | tr '\n' ' ') vs $(losses second | tr '\n' ' ')"
[ $status -eq 0 ] && echo "two runs: the same table (measured, then cached) and bitwise-equal losses"

cache=$(ls "$XDG_CACHE_HOME"/zerotrain/cpu_gemm-*.json)
cp "$cache" "$out/cache.good"
echo '{"format": 1, "signature": ' > "$cache"
train corrupt --set zt.steps=1 || fail "corrupt cache: $(tail -n 3 "$out/corrupt.log")"
[ "$(grep -c "note: ignored the GEMM path cache $cache" "$out/corrupt.log")" = 1 ] ||
  fail "no note on the corrupt cache: $(grep -m2 GEMM "$out/corrupt.log")"
grep -q 'cpu GEMM paths: .* measured' "$out/corrupt.log" || fail "the corrupt cache was not re-measured"

cp "$out/cache.good" "$cache"
train resume --set zt.steps=2 --set 'zt.checkpoint={"every_n_steps":2}' ||
  fail "2 steps with a checkpoint: $(tail -n 3 "$out/resume.log")"
sed -i 's/"chosen": "[a-z]*"/"chosen": "widened"/' "$cache"
train resume --set zt.steps=4 --resume || fail "--resume: $(tail -n 3 "$out/resume.log")"
grep -q "note: using the checkpoint's GEMM paths" "$out/resume.log" ||
  fail "no note on the checkpoint's paths: $(grep -m3 GEMM "$out/resume.log")"
[ "$(losses first)" = "$(losses resume)" ] ||
  fail "resumed losses differ: $(losses first | tr '\n' ' ') vs $(losses resume | tr '\n' ' ')"
[ $status -eq 0 ] && echo "resume: the checkpoint's table kept over the cache's, losses bitwise"

for bad in "env ZT_CPU_GEMM=fast" "set zt.cpu_gemm=fast"; do
  if [ "${bad%% *}" = env ]; then
    ZT_CPU_GEMM=fast train bad --set zt.steps=1
  else
    train bad --set zt.steps=1 --set zt.cpu_gemm=fast
  fi
  code=$?
  [ $code -eq 2 ] && grep -q "is 'fast'; use auto, measure, flags, native, packed, widened or packed_b" "$out/bad.log" ||
    fail "$bad: exit $code, $(tail -n 2 "$out/bad.log")"
done
ZT_CPU_GEMM=native train native16 --set zt.steps=1 --set bf16.enabled=false --set fp16.enabled=true
code=$?
[ $code -eq 2 ] && [ "$(grep -c "^zt-train: .*ZT_CPU_GEMM is 'native', but '.* fp16/fp16' cannot run on that path here" "$out/native16.log")" = 1 ] ||
  fail "ZT_CPU_GEMM=native in fp16: exit $code, $(grep -m2 zt-train "$out/native16.log")"
[ $status -eq 0 ] && echo "bad ZT_CPU_GEMM and zt.cpu_gemm, native fp16: one line each, exit 2"
exit $status
