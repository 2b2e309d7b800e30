#!/usr/bin/env bash
# tests/gpu/device_check.sh --dry-run: the GPU check's plumbing on the CPU back end, without a
# GPU. The dry run finishes within 2 minutes, leaves summary.json and its logs under $OUT, and
# every row's verdict is ok (PyTorch's, which needs a GPU, skipped); with ZT_CHECK_BUDGET_S=0
# every check is recorded as skipped, naming the spent budget, and the summary is still written.
# Usage: device_check_dry_run.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build=$(dirname "$bin")

start=$SECONDS
OUT=$tmp/dry ZT_BUILD_DIR=$build bash "$src/tests/gpu/device_check.sh" --dry-run
rc=$?
took=$((SECONDS - start))
echo "device_check --dry-run: exit $rc after $took s"
status=0
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; status=1; }
[ $took -le 120 ] || { echo "FAIL: took $took s (> 120 s)"; status=1; }
python3 - "$tmp/dry" << 'PY' || status=1
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
assert s["mode"] == "dry-run", s["mode"]
rows = s["checks"]
names = [r["name"] for r in rows]
expected = ["kernel parity", "bf16 B=", "MFU", "activation checkpointing", "stage 3 = stage 0",
            "vs CPU back end", "1 rank", "PyTorch"]
bad = [e for e in expected if not any(e in n for n in names)]
for r in rows:
    allowed = {"skipped"} if r["name"].startswith("PyTorch") else {"ok"}
    if r["verdict"] not in allowed:
        bad.append("%s: %s [%s]" % (r["name"], r["value"], r["verdict"]))
    if not isinstance(r["seconds"], int) or r["seconds"] < 0:
        bad.append("%s: seconds %r" % (r["name"], r["seconds"]))
for f in ("summary.txt", "parity.txt", "plain.json", "ckpt.json", "dev_s3/metrics.jsonl",
          "comm.txt"):
    if not os.path.exists(os.path.join(out, f)):
        bad.append("no " + f)
if bad:
    print("FAIL: " + "\n      ".join(bad))
    sys.exit(1)
print("summary.json: %d rows as expected, %d s" % (len(rows), s["elapsed_s"]))
PY

# A spent budget: every check skipped with the reason, the summary still written, exit 0.
OUT=$tmp/spent ZT_CHECK_BUDGET_S=0 ZT_BUILD_DIR=$build bash "$src/tests/gpu/device_check.sh" --dry-run > "$tmp/spent.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: budget 0 exit $rc"; cat "$tmp/spent.txt"; status=1; }
python3 - "$tmp/spent" << 'PY' || status=1
import json, os, sys
rows = json.load(open(os.path.join(sys.argv[1], "summary.json")))["checks"]
bad = [r for r in rows if r["verdict"] != "skipped" or "budget" not in r["value"]]
if len(rows) != 6 or bad:
    print("FAIL: with ZT_CHECK_BUDGET_S=0: %d rows, not skipped for the budget: %s" % (len(rows), bad))
    sys.exit(1)
print("budget 0: all %d checks skipped, naming the budget" % len(rows))
PY
exit $status
