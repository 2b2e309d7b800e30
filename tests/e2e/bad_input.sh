#!/usr/bin/env bash
# Every bad input to zt-train gives exit code 2 and exactly one line on stderr naming the
# problem (and the file). Usage: bad_input.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

source "$(dirname "$0")/lib/token_files.bash"

tokens=()
for i in $(seq 0 199); do tokens+=($((i % 97))); done
write_tokens "$tmp/good.bin" 20240520 1 200 "${tokens[@]}"
write_tokens "$tmp/magic.bin" 12345678 1 200 "${tokens[@]}"
write_tokens "$tmp/big_id.bin" 20240520 1 200 "${tokens[@]:0:150}" 150 "${tokens[@]:151}"
head -c $((1024 + 2 * 150)) "$tmp/good.bin" > "$tmp/truncated.bin"

# A valid config on a tiny model; each case below breaks one thing.
write_config() {  # write_config FILE [EXTRA_JSON_MEMBERS] [TRAIN_DATA]
  local extra=${2:-} data=${3:-$tmp/good.bin}
  cat > "$1" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  ${extra}
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zt": {"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 100, "n_positions": 16},
         "seq_len": 4, "steps": 1, "train_data": "$data", "output_dir": "$tmp/out"}
}
JSON
}

# expect NAME PATTERN ARGS...: zt-train ARGS must exit 2 with one stderr line matching PATTERN.
expect() {
  local name=$1 pattern=$2
  shift 2
  "$bin/zt-train" "$@" > "$tmp/stdout" 2> "$tmp/stderr"
  local rc=$? lines
  lines=$(wc -l < "$tmp/stderr")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -Eq -- "$pattern" "$tmp/stderr"; then
    echo "FAIL $name: exit $rc, $lines stderr lines, want exit 2 and one line matching '$pattern':"
    sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(cat "$tmp/stderr")"
  fi
}

write_config "$tmp/ok.json"
"$bin/zt-train" --config "$tmp/ok.json" > /dev/null 2> "$tmp/stderr" ||
  { echo "FAIL: the valid base config does not train:"; cat "$tmp/stderr"; exit 1; }

expect "missing config" "nope\.json" --config "$tmp/nope.json"
printf '{"train_micro_batch_size_per_gpu": 2,' > "$tmp/malformed.json"
expect "malformed JSON" "malformed\.json.*(parse|JSON|json)" --config "$tmp/malformed.json"
write_config "$tmp/unknown.json" '"zero_optimisation": {"stage": 0},'
expect "unknown key" "unknown\.json.*zero_optimisation.*zero_optimization" --config "$tmp/unknown.json"
write_config "$tmp/type.json" '"gradient_clipping": "high",'
expect "wrong type" "type\.json.*gradient_clipping" --config "$tmp/type.json"
write_config "$tmp/batch.json" '"train_batch_size": 6, "gradient_accumulation_steps": 2,'
expect "inconsistent batch sizes" "batch\.json.*train_batch_size" --config "$tmp/batch.json"
write_config "$tmp/truncated.json" "" "$tmp/truncated.bin"
expect "truncated token file" "truncated\.bin" --config "$tmp/truncated.json"
write_config "$tmp/magic.json" "" "$tmp/magic.bin"
expect "wrong magic" "magic\.bin.*magic" --config "$tmp/magic.json"
write_config "$tmp/big_id.json" "" "$tmp/big_id.bin"
expect "token id >= vocab" "big_id\.bin.*150" --config "$tmp/big_id.json"
write_config "$tmp/nodata.json" "" "$tmp/absent.bin"
expect "missing data file" "absent\.bin" --config "$tmp/nodata.json"
expect "bad override" "zt\.stepz" --config "$tmp/ok.json" --set zt.stepz=3
expect "unknown option" "bogus" --config "$tmp/ok.json" --bogus
write_config "$tmp/both16.json" '"fp16": {"enabled": true}, "bf16": {"enabled": true},'
expect "fp16 and bf16 both" "both16\.json.*fp16\.enabled.*bf16\.enabled" --config "$tmp/both16.json"
write_config "$tmp/commtype.json" '"bf16": {"enabled": true}, "communication_data_type": "fp16",'
expect "reduction type of the other 16-bit family" "commtype\.json.*communication_data_type.*bf16" \
  --config "$tmp/commtype.json"
write_config "$tmp/accum32.json" '"data_types": {"grad_accum_dtype": "bf16"},'
expect "16-bit gradient store in fp32 training" "accum32\.json.*grad_accum_dtype" --config "$tmp/accum32.json"
if ! nvidia-smi -L > /dev/null 2>&1; then  # only where there is no GPU
  expect "cuda device without a GPU" "ok\.json.*zt\.device.*cuda" --config "$tmp/ok.json" \
    --set zt.device=cuda
fi
expect "nccl without a GPU device" "ok\.json.*comm_backend.*nccl" --config "$tmp/ok.json" \
  --set zt.comm_backend=nccl
expect "unknown device" "ok\.json.*zt\.device.*tpu" --config "$tmp/ok.json" --set zt.device=tpu
write_config "$tmp/sparse.json" '"sparse_attention": {"mode": "fixed", "block": 16},'
expect "DeepSpeed block ZeroTrain does not have" "sparse\.json.*'sparse_attention' is not supported.*remove the block" \
  --config "$tmp/sparse.json"
write_config "$tmp/auto.json" '"gradient_clipping": "auto",'
expect "\"auto\" only the Hugging Face Trainer can fill" "auto\.json.*'gradient_clipping'.*--set gradient_clipping=1\.0" \
  --config "$tmp/auto.json"
write_config "$tmp/window.json" '"fp16": {"enabled": true, "loss_scale_window": 0},'
expect "fp16 loss_scale_window 0" "window\.json.*loss_scale_window" --config "$tmp/window.json"

write_config "$tmp/nvme.json" '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "'"$tmp"'/no_such_dir"}},'
expect "nvme_path not a directory" "nvme\.json.*zero_optimization\.offload_optimizer\.nvme_path.*no_such_dir.*not an existing directory" \
  --config "$tmp/nvme.json"
[ -e "$tmp/no_such_dir" ] && { echo "FAIL nvme_path: the missing directory was created"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ] || { echo "$failures bad-input case(s) failed"; exit 1; }
echo "all bad-input cases exit 2 with one clear line"
