#!/usr/bin/env bash
# tests/gpu/device_check.sh --dry-run: the GPU check's plumbing on the CPU back end, without a
# GPU. What the device tool's limits need of it, asserted here:
#   - the dry run finishes with every row ok (PyTorch's, which needs a GPU, skipped) inside the
#     per-check limits the script enforces itself, and $OUT holds at most 8 files (the tool
#     brings back no more), the logs in logs.tar.gz; its wall time is printed, not asserted (on
#     a loaded 2-core machine it varies; the limits are what bound it on the GPU machine);
#   - the checks' own limits and the preflight's sum below the budget;
#   - killed between checks, it leaves summary.json with the checks it finished;
#   - with ZT_CHECK_BUDGET_S=0 every check is recorded as skipped, naming the spent budget;
#   - --only reruns the named checks alone, and an unknown name is refused (exit 2);
#   - scripts/bundle_device.sh packs the binaries in under 48 MiB.
# Usage: device_check_dry_run.sh BIN_DIR SOURCE_DIR. Skips (77) when the corpus was not fetched.
set -u
bin=$1 src=$2
[ -f "$src/data/corpus/train.bin" ] || { echo "no corpus: run scripts/fetch_data.sh"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build=$(dirname "$bin")
check=$src/tests/gpu/device_check.sh
status=0
fail() { echo "FAIL: $*"; status=1; }

start=$SECONDS
OUT=$tmp/dry ZT_CHECK_LOGS=$tmp/dry_logs ZT_BUILD_DIR=$build bash "$check" --dry-run
rc=$?
took=$((SECONDS - start))
echo "device_check --dry-run: exit $rc after $took s"
[ $rc -eq 0 ] || fail "exit $rc"
n=$(find "$tmp/dry" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in \$OUT (the device tool brings back 8): $(ls "$tmp/dry")"
python3 - "$tmp/dry" << 'PY' || status=1
import json, os, sys, tarfile
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
assert s["mode"] == "dry-run", s["mode"]
rows = s["checks"]
names = [r["name"] for r in rows]
expected = ["preflight", "smoke", "bf16 B=", "planner vs tracker", "MFU", "PyTorch", "materialised attention", "kernel parity",
            "stage 3 = stage 0", "vs CPU back end", "1 rank", "activation checkpointing"]
bad = [e for e in expected if not any(e in n for n in names)]
for r in rows:
    allowed = {"skipped"} if r["name"].startswith("PyTorch") else {"ok"}
    if r["verdict"] not in allowed:
        bad.append("%s: %s [%s]" % (r["name"], r["value"], r["verdict"]))
    if not isinstance(r["seconds"], int) or r["seconds"] < 0:
        bad.append("%s: seconds %r" % (r["name"], r["seconds"]))
total = s["preflight_limit_s"] + sum(s["limits_s"].values())
if total >= s["budget_s"]:
    bad.append("limits sum to %d s, not below the %d s budget" % (total, s["budget_s"]))
for f in ("summary.txt", "ldd.txt", "profile.txt", "logs.tar.gz"):
    if not os.path.exists(os.path.join(out, f)):
        bad.append("no " + f)
with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
    packed = {m.name.lstrip("./") for m in t.getmembers()}
for f in ("smoke.json", "parity.txt", "plain.json", "reference.json", "ckpt.json", "dev_s3/metrics.jsonl",
          "comm.txt"):
    if f not in packed:
        bad.append("logs.tar.gz has no " + f)
if "profile" not in open(os.path.join(out, "profile.txt")).read():
    bad.append("profile.txt has no per-op table")
if bad:
    print("FAIL: " + "\n      ".join(bad))
    sys.exit(1)
print("summary.json: %d rows as expected, %d s; limits %d s of %d" %
      (len(rows), s["elapsed_s"], total, s["budget_s"]))
PY

# Killed between checks: the summary holds every check finished so far, each whole.
OUT=$tmp/killed ZT_CHECK_LOGS=$tmp/killed_logs ZT_BUILD_DIR=$build setsid bash "$check" --dry-run \
  > "$tmp/killed.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q '"name": "smoke' "$tmp/killed/summary.json" 2> /dev/null && break
  sleep 0.1
done
kill -KILL -- -"$pid" 2> /dev/null
wait "$pid" 2> /dev/null
python3 - "$tmp/killed" << 'PY' || status=1
import json, os, sys
rows = json.load(open(os.path.join(sys.argv[1], "summary.json")))["checks"]
names = [r["name"] for r in rows]
if len(rows) < 2 or not names[0] == "preflight" or not names[1].startswith("smoke") or \
        any(r["verdict"] != "ok" for r in rows):
    print("FAIL: killed after the smoke check, summary.json has %s" % rows)
    sys.exit(1)
print("killed after the smoke check: summary.json keeps %d finished rows" % len(rows))
PY

# A spent budget: every check skipped with the reason, the summary still written, exit 0.
OUT=$tmp/spent ZT_CHECK_BUDGET_S=0 ZT_BUILD_DIR=$build bash "$check" --dry-run > "$tmp/spent.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "budget 0 exit $rc"; cat "$tmp/spent.txt"; }
python3 - "$tmp/spent" << 'PY' || status=1
import json, os, sys
rows = json.load(open(os.path.join(sys.argv[1], "summary.json")))["checks"][1:]
bad = [r for r in rows if r["verdict"] != "skipped" or "budget" not in r["value"]]
if len(rows) != 8 or bad:
    print("FAIL: with ZT_CHECK_BUDGET_S=0: %d rows, not skipped for the budget: %s" % (len(rows), bad))
    sys.exit(1)
print("budget 0: all %d checks skipped, naming the budget" % len(rows))
PY

# --only: the named checks alone; an unknown name refused before anything runs.
OUT=$tmp/only ZT_BUILD_DIR=$build bash "$check" --dry-run --only smoke,comm > "$tmp/only.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "--only smoke,comm exit $rc"; cat "$tmp/only.txt"; }
python3 - "$tmp/only" << 'PY' || status=1
import json, os, sys
names = [r["name"] for r in json.load(open(os.path.join(sys.argv[1], "summary.json")))["checks"]]
if len(names) != 3 or not names[1].startswith("smoke") or "1 rank" not in names[2]:
    print("FAIL: --only smoke,comm ran %s" % names)
    sys.exit(1)
print("--only smoke,comm: %s" % names)
PY
OUT=$tmp/bad bash "$check" --dry-run --only smoke,nosuch > "$tmp/bad.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "unknown check 'nosuch'" "$tmp/bad.txt" || fail "--only nosuch: exit $rc, $(cat "$tmp/bad.txt")"

# The bundle the device tool carries: under 48 MiB (the tool carries 64 MiB in all).
if bash "$src/scripts/bundle_device.sh" "$build" "$tmp/bundle" > "$tmp/bundle.txt" 2>&1; then
  size=$(sed -n 's/^bundle_device: size_bytes \([0-9]*\)$/\1/p' "$tmp/bundle.txt")
  echo "bundle: ${size:-?} bytes"
  [ -n "$size" ] && [ "$size" -lt $((48 << 20)) ] || fail "bundle ${size:-of unknown size} not under 48 MiB"
else
  fail "bundle_device.sh: $(tail -n 3 "$tmp/bundle.txt")"
fi
exit $status
