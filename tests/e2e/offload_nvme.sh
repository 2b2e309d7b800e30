#!/usr/bin/env bash
# ZeRO-Infinity's optimizer tier and the device capacity, end to end on configs/gpt2-tiny.json
# (2 ranks, stage 2, bf16, one micro-batch of 16 tokens per rank, 2 steps):
#   - offload_optimizer "nvme" (swap files under a scratch nvme_path) gives bitwise the losses,
#     gradient norms and saved weights of the run without offload, holds no optimizer bytes on
#     the device or in host memory, and reports as many bytes in swap files as the host tier
#     holds with "cpu" (the fp32 master and Adam's m and v: 12 per element of the rank's shard);
#     its swap files are gone after the clean exit;
#   - with zt.device_memory_limit below the model states (56 MB), the run without offload stops
#     before step 1 with one line naming the optimizer and the limit, and the same config trains
#     with the optimizer offloaded to cpu or nvme, within the limit;
#   - a run killed with SIGKILL in the middle of training leaves its swap files; the next run on
#     the same nvme_path removes them (saying so) and trains.
# Usage: offload_nvme.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out/swap"
status=0
fail() { echo "FAIL: $*"; status=1; }
train() {  # name, steps, extra --set arguments; returns zt-train's exit code
  local name=$1 steps=$2
  shift 2
  mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps="$steps" --set zt.eval_every=0 \
    --set scheduler.params.total_num_steps="$steps" --set bf16.enabled=true \
    --set train_micro_batch_size_per_gpu=1 --set train_batch_size=2 --set zt.seq_len=16 \
    --set zero_optimization.offload_optimizer.nvme_path="$out/swap" \
    --set zt.save_weights="$out/$name.safetensors" "$@" > "$out/$name.log" 2>&1
}
trained() { grep '"step":' "$out/$1/metrics.jsonl" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*'; }
summary_field() {  # run, object, category: a number from the summary row
  grep -o "[{,]\"$2\":{[^}]*}" "$out/$1/metrics.jsonl" | grep -o "\"$3\":[0-9.e+]*" | cut -d: -f2
}

train plain 2 || fail "the run without offload did not train: $(tail -n 3 "$out/plain.log")"
train cpu 2 --set zero_optimization.offload_optimizer.device=cpu ||
  fail "offload cpu did not train: $(tail -n 3 "$out/cpu.log")"
train nvme 2 --set zero_optimization.offload_optimizer.device=nvme ||
  fail "offload nvme did not train: $(tail -n 3 "$out/nvme.log")"
[ $status -eq 0 ] || exit 1
[ -n "$(trained plain)" ] && [ "$(trained plain)" = "$(trained nvme)" ] ||
  fail "losses or gradient norms differ with offload nvme"
cmp -s "$out/plain.safetensors" "$out/nvme.safetensors" || fail "saved weights differ with offload nvme"
plain_optim=$(summary_field plain peak_bytes_max optimizer)
host_optim=$(summary_field cpu host_peak_bytes_max optimizer)
nvme_bytes=$(summary_field nvme nvme_bytes_max optimizer)
grep -q "peak memory per rank (MiB):.*device min.*host min.*nvme min" "$out/nvme.log" ||
  fail "the end-of-run table has no device, host and nvme columns"
is_zero() { awk -v x="$1" 'BEGIN { exit !(x != "" && x == 0) }'; }
is_zero "$(summary_field nvme peak_bytes_max optimizer)" || fail "device optimizer bytes with nvme"
is_zero "$(summary_field nvme host_peak_bytes_max optimizer)" || fail "host optimizer bytes with nvme"
awk -v a="$host_optim" -v b="$nvme_bytes" -v c="$plain_optim" 'BEGIN { exit !(a == b && b == c && a > 0) }' ||
  fail "optimizer bytes: host (cpu) $host_optim, swap files (nvme) $nvme_bytes, device without offload $plain_optim"
[ -z "$(ls -A "$out/swap")" ] || fail "swap files left after a clean exit: $(ls -R "$out/swap" | head)"
echo "nvme: bitwise equal to no offload; optimizer state $nvme_bytes bytes in swap files per rank (host tier with cpu: $host_optim; device without offload: $plain_optim); none left after exit"

# The device capacity: model states that do not fit stop the run before step 1; offload fits.
# (No weights saved here: gathering the fp32 master of the embeddings for the file needs more
# device memory than the limit leaves.)
limit=56MB
train limited 2 --set zt.device_memory_limit=$limit --set zt.save_weights=
rc=$?
lines=$(grep -c '^zt-train: ' "$out/limited.log")
if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! grep '^zt-train: ' "$out/limited.log" | grep -q "optimizer asked for.*zt.device_memory_limit" ||
   grep -q '"step":' "$out/limited/metrics.jsonl" 2>/dev/null; then
  fail "limit $limit without offload: want one error line before step 1, got exit $rc: $(grep '^zt-train: ' "$out/limited.log" | head -n 2)"
fi
for device in cpu nvme; do
  train "limited-$device" 2 --set zt.device_memory_limit=$limit --set zt.save_weights= \
    --set zero_optimization.offload_optimizer.device=$device ||
    fail "limit $limit with offload $device did not train: $(grep '^zt-train: ' "$out/limited-$device.log")"
  peak=$(summary_field "limited-$device" peak_bytes_max total)
  awk -v p="$peak" 'BEGIN { exit !(p > 0 && p <= 56000000) }' || fail "offload $device peak $peak past the limit"
done
echo "limit $limit: without offload stopped before step 1 ($(grep '^zt-train: ' "$out/limited.log" | cut -c1-90)...); offload cpu and nvme trained within it"

# A run killed mid-training leaves its swap files; the next one replaces them and trains.
(train killed 400 --set zero_optimization.offload_optimizer.device=nvme) 2> /dev/null &
for _ in $(seq 1 100); do grep -q '"step":2' "$out/killed/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
pkill -KILL -f "zt.output_dir=$out/killed" || true
wait
left=$(find "$out/swap" -name '*.swp' | wc -l)
[ "$left" -gt 0 ] || fail "the killed run left no swap files (was it killed mid-training?)"
train after 1 --set zero_optimization.offload_optimizer.device=nvme || fail "the run after the kill did not train: $(tail -n 3 "$out/after.log")"
grep -q "stale" "$out/after.log" || fail "the run after the kill did not report the stale swap files"
[ -z "$(ls -A "$out/swap")" ] || fail "swap files left after the run that followed the kill"
echo "SIGKILL: $left swap files left behind; the next run removed them ($(grep -m1 stale "$out/after.log" | cut -c1-100)) and trained"
exit $status
