#!/usr/bin/env bash
# ZeRO-Offload end to end: configs/gpt2-tiny.json on 2 ranks trained for 2 steps with
# zero_optimization.offload_optimizer.device "cpu" gives bitwise the losses, gradient norms and
# saved weights of the same run without offload (stage 1 fp32, stage 2 bf16, stage 3 fp16);
# the offloaded run holds no optimizer bytes on the device and reports its host tier.
# Usage: offload_optimizer.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -eu
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train() {  # name, extra --set arguments
  local name=$1
  shift
  mpirun --oversubscribe -np 2 "$bin/zt-train" --config configs/gpt2-tiny.json \
    --set zt.output_dir="$out/$name" --set zt.steps=2 --set zt.eval_every=0 \
    --set scheduler.params.total_num_steps=2 --set zt.save_weights="$out/$name.safetensors" \
    "$@" > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "FAIL: $name did not train"; exit 1; }
}
# The metrics rows without what differs by design (time, memory).
trained() { grep '"step":' "$out/$1/metrics.jsonl" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*'; }
status=0
for run in "1 fp32" "2 bf16" "3 fp16"; do
  set -- $run
  stage=$1 precision=$2
  extra=(--set zero_optimization.stage="$stage")
  [ "$precision" = fp32 ] || extra+=(--set "$precision".enabled=true)
  train "s$stage-$precision" "${extra[@]}"
  train "s$stage-$precision-offload" "${extra[@]}" --set zero_optimization.offload_optimizer.device=cpu
  a="s$stage-$precision" b="s$stage-$precision-offload"
  if [ "$(trained "$a")" != "$(trained "$b")" ] || [ -z "$(trained "$a")" ]; then
    echo "FAIL stage $stage $precision: losses or gradient norms differ with offload"; status=1
  fi
  cmp -s "$out/$a.safetensors" "$out/$b.safetensors" ||
    { echo "FAIL stage $stage $precision: saved weights differ with offload"; status=1; }
  device_optim=$(grep -o '"peak_bytes_max":{[^}]*}' "$out/$b/metrics.jsonl" | grep -o '"optimizer":[0-9]*' | cut -d: -f2)
  host_optim=$(grep -o '"host_peak_bytes_max":{[^}]*}' "$out/$b/metrics.jsonl" | grep -o '"optimizer":[0-9]*' | cut -d: -f2)
  plain_optim=$(grep -o '"peak_bytes_max":{[^}]*}' "$out/$a/metrics.jsonl" | grep -o '"optimizer":[0-9]*' | cut -d: -f2)
  if [ "$device_optim" != 0 ] || [ -z "$host_optim" ] || [ "$host_optim" -lt "$plain_optim" ]; then
    echo "FAIL stage $stage $precision: optimizer bytes device $device_optim host $host_optim (no offload: $plain_optim)"
    status=1
  fi
  grep -q "peak memory per rank (MiB):.*device min.*host min" "$out/$b.log" ||
    { echo "FAIL: no host column in the end-of-run table"; status=1; }
  [ $status -ne 0 ] || echo "stage $stage $precision: bitwise equal with offload; optimizer bytes on the host $host_optim (device without offload $plain_optim)"
done
exit $status
