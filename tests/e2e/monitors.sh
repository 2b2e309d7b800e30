#!/usr/bin/env bash
# DeepSpeed's monitor blocks on a real run: a tiny GPT-2, 2 ranks, 10 steps, both "tensorboard"
# and "csv_monitor" enabled, a checkpoint every 5 steps:
#   - the TensorBoard event file, decoded by a reader written here from the published format
#     (TFRecord: length, masked CRC32C of it, the Event, masked CRC32C of it, the CRCs computed
#     bit by bit; protobuf's wire format for Event/Summary/Value), holds every step's scalars
#     of metrics.jsonl as floats, each once, against step x train_batch_size; the CSV files hold
#     them in full, DeepSpeed's layout;
#   - the run resumed from its step-5 checkpoint: the same holds, no step twice;
#   - the monitors' directory on a 64 KiB tmpfs: the run ends, non-zero, with one line naming a
#     file there and the OS error (skipped, saying so, where a tmpfs cannot be mounted).
# Usage: monitors.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun or python3.
set -u
bin=$1
source "$(dirname "$0")/lib/token_files.bash"
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v python3 > /dev/null || { echo "skip: no python3"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
mounted=0
cleanup() {
  [ "$mounted" -eq 1 ] && umount "$tmp/small"
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

tokens=()
for i in $(seq 0 1999); do tokens+=($(( (i * 7 + i / 13) % 97 ))); done
write_tokens "$tmp/train.bin" 20240520 1 2000 "${tokens[@]}"
job() {  # OUT MONITOR_DIR STEPS
  cat <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "steps_per_print": 5,
  "zero_optimization": {"stage": 2},
  "tensorboard": {"enabled": true, "output_path": "$2", "job_name": "tb"},
  "csv_monitor": {"enabled": true, "output_path": "$2", "job_name": "csv"},
  "zt": {"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 100, "n_positions": 16},
         "seq_len": 8, "steps": $3, "eval_every": 5, "eval_batches": 1,
         "train_data": "$tmp/train.bin", "val_data": "$tmp/train.bin", "output_dir": "$1",
         "checkpoint": {"every_n_steps": 5}}
}
JSON
}
train() {  # NAME ARGS...
  local name=$1
  shift
  timeout 120 mpirun --oversubscribe -np 2 "$bin/zt-train" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}

# The reader: every scalar of the event files and CSV files against metrics.jsonl.
cat > "$tmp/check.py" <<'PY'
import glob, json, os, struct, sys
run, mon, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i); f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i); yield f, v
        elif w == 1: yield f, b[i:i + 8]; i += 8
        elif w == 5: yield f, b[i:i + 4]; i += 4
        elif w == 2: n, i = varint(b, i); yield f, b[i:i + n]; i += n
        else: sys.exit(f"wire type {w}")
want = {}
for line in open(os.path.join(run, "metrics.jsonl")):
    row = json.loads(line)
    if "step" not in row: continue
    x = row["step"] * batch
    for key, tag in [("loss", "train_loss"), ("lr", "lr"), ("grad_norm", "grad_norm"),
                     ("tokens_per_s", "tokens_per_s"), ("val_loss", "val_loss")]:
        if key in row: want[("Train/Samples/" + tag, x)] = row[key]
    for cat, v in row.get("peak_bytes", {}).items(): want[("Train/Samples/peak_bytes_" + cat, x)] = v
tb = {}
files = sorted(glob.glob(os.path.join(mon, "tb", "events.out.tfevents.*")))
for name in files:
    data = open(name, "rb").read(); at = 0; first = True
    while at < len(data):
        n = struct.unpack("<Q", data[at:at + 8])[0]
        assert struct.unpack("<I", data[at + 8:at + 12])[0] == masked(data[at:at + 8]), name
        rec = data[at + 12:at + 12 + n]
        assert struct.unpack("<I", data[at + 12 + n:at + 16 + n])[0] == masked(rec), name
        at += 16 + n
        ev = dict(step=0, summary=None, version=None)
        for f, v in fields(rec):
            if f == 2: ev["step"] = v
            if f == 3: ev["version"] = v
            if f == 5: ev["summary"] = v
        if first:
            assert ev["version"] == b"brain.Event:2", name; first = False; continue
        for f, value in fields(ev["summary"]):
            tag = val = None
            for g, x in fields(value):
                if g == 1: tag = x.decode()
                if g == 2: val = struct.unpack("<f", x)[0]
            key = (tag, ev["step"])
            assert key not in tb, f"{key} twice in the event files"
            tb[key] = val
assert set(tb) == set(want), f"event scalars {len(tb)}, metrics.jsonl {len(want)}: {sorted(set(tb) ^ set(want))[:5]}"
for key, v in want.items():
    assert tb[key] == struct.unpack("<f", struct.pack("<f", v))[0], (key, tb[key], v)
csv = {}
for name in glob.glob(os.path.join(mon, "csv", "*.csv")):
    lines = open(name).read().splitlines()
    tag = "Train/Samples/" + os.path.basename(name)[len("Train_Samples_"):-4]
    assert lines[0] == "step," + tag.split("/")[-1], (name, lines[0])
    for line in lines[1:]:
        x, v = line.split(","); key = (tag, int(x))
        assert key not in csv, f"{key} twice in {name}"; csv[key] = float(v)
assert csv == want, f"csv {len(csv)} values, metrics.jsonl {len(want)}"
print(f"{len(files)} event file(s), {len(tb)} scalars; {len(csv)} CSV values: all equal to metrics.jsonl's")
PY

job "$tmp/run" "$tmp/mon" 10 > "$tmp/job.json"
train first --config "$tmp/job.json" || fail "the run: $(tail -2 "$tmp/first.err")"
python3 "$tmp/check.py" "$tmp/run" "$tmp/mon" 4 || fail "the run's monitors"
train resumed --config "$tmp/job.json" --resume "$tmp/run/checkpoints/step5" ||
  fail "the resumed run: $(tail -2 "$tmp/resumed.err")"
python3 "$tmp/check.py" "$tmp/run" "$tmp/mon" 4 || fail "the resumed run's monitors"

mkdir -p "$tmp/small"
if mount -t tmpfs -o size=64k tmpfs "$tmp/small" 2> "$tmp/mount.err"; then
  mounted=1
  job "$tmp/full" "$tmp/small" 2000 > "$tmp/full.json"
  train full --config "$tmp/full.json"
  rc=$?
  echo "monitors on a 64 KiB tmpfs: exit $rc; $(grep '^zt-train: ' "$tmp/full.err")"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "exit $rc"
  [ "$(grep -c '^zt-train: ' "$tmp/full.err")" -eq 1 ] || fail "not one zt-train line"
  grep -q "^zt-train: rank 0: cannot write $tmp/small/.*: No space left on device" "$tmp/full.err" ||
    fail "no line naming a monitor file and the OS error"
else
  echo "cannot mount a tmpfs ($(cat "$tmp/mount.err")): the full-disk case is not run"
fi
[ "$failed" -eq 0 ] && echo "monitors: ok"
exit $failed
