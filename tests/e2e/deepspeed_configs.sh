#!/usr/bin/env bash
# DeepSpeed configs as users write them (configs/deepspeed/*.json, no zt block): each is merged
# with a zt block (gpt2-tiny on the corpus, seq_len 32, 2 steps) and run with mpirun -np 2.
# Each must train its two steps (the offload files too: optimizer and parameters on the host
# tier). No output may contain "unknown key". When the first run stops on
# "auto" values zt-train cannot derive, the script applies the --set fixes that line prints and
# reruns; then every "auto" in the file must be named by that line or by a start-up note of the
# run that trains, and every text a file lists under "_notes" must be in a start-up note (keys
# DeepSpeed accepts but ignores in that case: noted, not refused). Usage: deepspeed_configs.sh BIN_DIR SOURCE_DIR. Skips (77) without the corpus.
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

# merge DS_FILE OUT_JSON OUT_DIR: the DeepSpeed file plus our zt block.
merge() {
  python3 - "$1" "$2" "$3" "$src" <<'PY'
import json, sys
ds, out, out_dir, src = sys.argv[1:5]
config = json.load(open(ds))
assert "zt" not in config, ds + " is a DeepSpeed file: it must not have a zt block"
config["zt"] = {"model": "gpt2-tiny", "seq_len": 32, "steps": 2,
                "train_data": src + "/data/corpus/train.bin", "val_data": src + "/data/corpus/val.bin",
                "output_dir": out_dir, "num_threads": 1}
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
done

[ "$failures" -eq 0 ] || { echo "$failures DeepSpeed config check(s) failed"; exit 1; }
echo "every DeepSpeed config trains; every \"auto\" resolved or named"
