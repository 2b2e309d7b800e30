#!/usr/bin/env bash
# DeepSpeed configs as users write them (configs/deepspeed/*.json, no zt block): each is merged
# with a zt block (gpt2-tiny on the corpus, seq_len 32, 2 steps) and run with mpirun -np 2.
# Each must train its two steps (the offload files too: optimizer and parameters on the host
# tier). No output may contain "unknown key". When the first run stops on
# "auto" values zt-train cannot derive, the script applies the --set fixes that line prints and
# reruns; then every "auto" in the file must be named by that line or by a start-up note of the
# run that trains, and every text a file lists under "_notes" must be in a start-up note (keys
# DeepSpeed accepts but ignores in that case: noted, not refused). A file with "auto" runs a
# second time with the Hugging Face Trainer's arguments in its zt block instead (max_steps,
# learning_rate, ...: runtime/config/trainer_arguments.h): it must train its two steps with no
# fix, every "auto" in the start-up table of values from them or in a note.
# Usage: deepspeed_configs.sh BIN_DIR SOURCE_DIR. Skips (77) without the corpus.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0

fail() { echo "FAIL $name: $*"; failures=$((failures + 1)); }

# merge DS_FILE OUT_JSON OUT_DIR [trainer]: the DeepSpeed file plus our zt block; with
# "trainer", the zt block gives the run's length and hyperparameters only as the Hugging Face
# Trainer's arguments (max_steps, learning_rate, ...), as a Trainer user's script would.
merge() {
  python3 - "$1" "$2" "$3" "$src" "${4:-}" <<'PY'
import json, sys
ds, out, out_dir, src, variant = sys.argv[1:6]
config = json.load(open(ds))
assert "zt" not in config, ds + " is a DeepSpeed file: it must not have a zt block"
config["zt"] = {"model": "gpt2-tiny", "seq_len": 32, "steps": 2,
                "train_data": src + "/data/corpus/train.bin", "val_data": src + "/data/corpus/val.bin",
                "output_dir": out_dir, "num_threads": 1}
if variant == "trainer":
    del config["zt"]["steps"]
    config["zt"].update({"max_steps": 2, "learning_rate": 1e-4, "weight_decay": 0.0,
                         "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
                         "max_grad_norm": 1.0, "warmup_steps": 1, "lr_scheduler_type": "linear",
                         "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                         "fp16": False})
    # --bf16 as the file's user would pass it: with a file that enables bf16 itself.
    config["zt"]["bf16"] = config.get("bf16", config.get("bfloat16", {})).get("enabled") is True
json.dump(config, open(out, "w"), indent=1)
PY
}

# auto_paths DS_FILE: the key path of every "auto" value, one a line.
auto_paths() {
  python3 - "$1" <<'PY'
import json, sys
def walk(node, path):
    if isinstance(node, dict):
        for k, v in node.items():
            walk(v, path + [k])
    elif node == "auto":
        print(".".join(path))
walk(json.load(open(sys.argv[1])), [])
PY
}

# run ARGS...: zt-train on 2 ranks; sets rc, and leaves $tmp/out, $tmp/err.
run() {
  mpirun --oversubscribe -np 2 "$bin/zt-train" "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err" >> "$tmp/all"
}

for file in configs/deepspeed/*.json; do
  name=$(basename "$file" .json)
  : > "$tmp/all"
  out_dir="$tmp/$name"
  merge "$file" "$tmp/$name.json" "$out_dir" || { fail "cannot merge"; continue; }
  run --config "$tmp/$name.json"
  named=""
  fixes=()
  if [ "$rc" -eq 2 ] && grep -q 'which the Hugging Face Trainer fills in' "$tmp/err"; then
    named=$(grep '^zt-train: ' "$tmp/err")
    read -r -a fixes <<< "$(grep -o -- '--set [^ ()]*' <<< "$named" | tr '\n' ' ')"
    echo "     $name: \"auto\" named; rerunning with ${fixes[*]}"
    run --config "$tmp/$name.json" "${fixes[@]}"
  fi
  if grep -q "unknown key" "$tmp/all"; then fail "output says unknown key:"; grep "unknown key" "$tmp/all"; fi
  if [ "$rc" -ne 0 ] || ! grep -q '"step":2,' "$out_dir/metrics.jsonl" 2> /dev/null; then
    fail "did not train 2 steps (exit $rc):"
    sed 's/^/    /' "$tmp/err" | head -20
    continue
  fi
  notes=$(grep 'note: ' "$tmp/out")
  for path in $(auto_paths "$file"); do
    if ! grep -qF "'$path'" <<< "$named$notes"; then fail "\"auto\" at '$path' is neither resolved nor named"; fi
  done
  # "_notes" (a comment key, so DeepSpeed and zt-train skip it): notes the run must print.
  while IFS= read -r want; do
    [ -z "$want" ] || grep -qF -- "$want" <<< "$notes" || fail "no start-up note with: $want"
  done < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1])).get("_notes", [])))' "$file")
  echo "ok   $name: trained 2 steps; $(grep -c 'note: ' <<< "$notes") notes"
  # A file with "auto": the Trainer's arguments alone make it train, every "auto" filled from
  # them (the start-up table) or derived (a note), none left to name.
  [ -n "$(auto_paths "$file")" ] || continue
  : > "$tmp/all"
  merge "$file" "$tmp/$name.trainer.json" "$out_dir.trainer" trainer || { fail "cannot merge"; continue; }
  run --config "$tmp/$name.trainer.json"
  if [ "$rc" -ne 0 ] || ! grep -q '"step":2,' "$out_dir.trainer/metrics.jsonl" 2> /dev/null; then
    fail "with the Trainer's arguments: did not train 2 steps (exit $rc):"
    sed 's/^/    /' "$tmp/err" | head -20
    continue
  fi
  table=$(sed -n '/Trainer.s arguments in the zt block:/,/^[^ ]/p' "$tmp/out")
  for path in $(auto_paths "$file"); do
    grep -qE "^  $path " <<< "$table" || grep -qF "'$path'" "$tmp/out" ||
      fail "with the Trainer's arguments: \"auto\" at '$path' is not filled"
  done
  echo "ok   $name: trained 2 steps from the Trainer's arguments; $(grep -c '^  [a-z]' <<< "$table") values from them"
done

[ "$failures" -eq 0 ] || { echo "$failures DeepSpeed config check(s) failed"; exit 1; }
echo "every DeepSpeed config trains; every \"auto\" resolved or named"
