#!/usr/bin/env bash
# ZeRO-Infinity's parameter tier end to end on configs/gpt2-tiny.json (2 ranks, ZeRO stage 3,
# bf16, every unit sharded: stage3_param_persistence_threshold 0, one micro-batch of 16 tokens
# per rank, 2 steps), with the optimizer offloaded too (offload_param needs it):
#   - offload_param "cpu" and "nvme" (swap files under a scratch nvme_path, shared with the
#     optimizer's) give bitwise the losses, gradient norms and saved weights of the run without
#     offload; the device holds no parameter and no optimizer bytes; the parameter shards' bytes
#     (what the device holds without offload) are in host memory with "cpu" and in swap files
#     with "nvme"; the swap files are gone after the clean exit;
#   - with zt.device_memory_limit below the model states, the run without offload stops before
#     step 1 with one line naming the limit, and the same config trains with both offloaded,
#     within the limit;
#   - offload_param without offload_optimizer is refused naming the config.
# Usage: offload_param.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
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
train() {  # name, extra --set arguments; returns zt-train's exit code
  local name=$1
  shift
  mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps=2 --set zt.eval_every=0 \
    --set scheduler.params.total_num_steps=2 --set bf16.enabled=true \
    --set train_micro_batch_size_per_gpu=1 --set train_batch_size=2 --set zt.seq_len=16 \
    --set zero_optimization.stage=3 --set zero_optimization.stage3_param_persistence_threshold=0 \
    --set zero_optimization.offload_optimizer.nvme_path="$out/swap" \
    --set zero_optimization.offload_param.nvme_path="$out/swap" \
    --set zt.save_weights="$out/$name.safetensors" "$@" > "$out/$name.log" 2>&1
}
offload() {  # device: the --set arguments offloading both to it
  echo --set zero_optimization.offload_optimizer.device="$1" --set zero_optimization.offload_param.device="$1"
}
trained() { grep '"step":' "$out/$1/metrics.jsonl" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*'; }
summary_field() {  # run, object, category: a number from the summary row
  grep -o "[{,]\"$2\":{[^}]*}" "$out/$1/metrics.jsonl" | grep -o "\"$3\":[0-9.e+]*" | cut -d: -f2
}
is_zero() { awk -v x="$1" 'BEGIN { exit !(x != "" && x == 0) }'; }

train plain || fail "the run without offload did not train: $(tail -n 3 "$out/plain.log")"
# shellcheck disable=SC2046
train cpu $(offload cpu) || fail "offload cpu did not train: $(tail -n 3 "$out/cpu.log")"
# shellcheck disable=SC2046
train nvme $(offload nvme) || fail "offload nvme did not train: $(tail -n 3 "$out/nvme.log")"
[ $status -eq 0 ] || exit 1
plain_params=$(summary_field plain peak_bytes_max params)
for run in cpu nvme; do
  [ -n "$(trained plain)" ] && [ "$(trained plain)" = "$(trained $run)" ] ||
    fail "losses or gradient norms differ with offload $run"
  cmp -s "$out/plain.safetensors" "$out/$run.safetensors" || fail "saved weights differ with offload $run"
  is_zero "$(summary_field $run peak_bytes_max params)" || fail "device parameter bytes with $run"
  is_zero "$(summary_field $run peak_bytes_max optimizer)" || fail "device optimizer bytes with $run"
done
host_params=$(summary_field cpu host_peak_bytes_max params)
nvme_params=$(summary_field nvme nvme_bytes_max params)
awk -v a="$host_params" -v b="$nvme_params" -v c="$plain_params" 'BEGIN { exit !(a == c && b == c && c > 0) }' ||
  fail "parameter bytes: host (cpu) $host_params, swap files (nvme) $nvme_params, device without offload $plain_params"
grep -q "offload_param: stage-3 parameter shards in swap files under" "$out/nvme.log" ||
  fail "no start-up line for the parameter tier"
[ -z "$(ls -A "$out/swap")" ] || fail "swap files left after a clean exit: $(ls -R "$out/swap" | head)"
echo "offload_param: bitwise equal to no offload with cpu and nvme; parameter shards $plain_params bytes per rank on the device without offload, $host_params in host memory (cpu), $nvme_params in swap files (nvme); none left after exit"

# A device too small for the model states without offload: every rank stops before step 1; with
# both offloaded the same limit trains.
plain_total=$(summary_field plain peak_bytes_max total)
limit=$(awk -v p="$plain_params" -v o="$(summary_field plain peak_bytes_max optimizer)" -v t="$plain_total" 'BEGIN { printf "%d", t - (p + o) / 2 }')
train small --set zt.device_memory_limit="$limit"
rc=$?
[ $rc -eq 1 ] && grep -q "^zt-train: rank [01]: out of device memory on cpu: .*zt\.device_memory_limit" "$out/small.log" &&
  ! grep -qE '^step +[0-9]+/' "$out/small.log" ||
  fail "without offload under a $limit-byte limit: exit $rc, $(grep '^zt-train: ' "$out/small.log" | head -2)"
# shellcheck disable=SC2046
train small_offload --set zt.device_memory_limit="$limit" $(offload nvme) ||
  fail "both offloaded to nvme under a $limit-byte limit did not train: $(tail -n 3 "$out/small_offload.log")"
peak=$(summary_field small_offload peak_bytes_max total)
awk -v p="$peak" -v l="$limit" 'BEGIN { exit !(p > 0 && p <= l) }' || fail "peak $peak past the limit $limit"
[ $status -eq 0 ] && echo "device limit $limit bytes (the no-offload peak $plain_total less half its parameter and optimizer bytes): no offload stops before step 1; both offloaded to nvme train with a peak of $peak"

train refused --set zero_optimization.offload_param.device=cpu
rc=$?
[ $rc -ne 0 ] && grep -q "configs/gpt2-tiny.json.*'zero_optimization.offload_param' needs 'zero_optimization.offload_optimizer' too" "$out/refused.log" ||
  fail "offload_param alone: exit $rc, $(grep -i 'offload' "$out/refused.log" | head -2)"
exit $status
