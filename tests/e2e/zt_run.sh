#!/usr/bin/env bash
# zt-run, the launcher over mpirun (tools/zt_run_main.cpp): the mpirun line it prints for root
# and not root, within and beyond the slots, with a hostfile; bad arguments exit 2 with one
# line; and a real 2-rank zt-train job on configs/gpt2-tiny.json started through it with no Open
# MPI variable set (zt-run adds --allow-run-as-root itself when root).
# Usage: zt_run.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun.
set -u
bin=$1 src=$2
source "$(dirname "$0")/lib/token_files.bash"
mpirun_path=$(command -v mpirun) || { echo "no mpirun"; exit 77; }
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
path_dirs="$(dirname "$mpirun_path"):/usr/bin:/bin"
# A clean environment: only PATH (without BIN_DIR) is set, so the forwarded variables are known.
run_clean() { env -i PATH="$path_dirs" "$bin/zt-run" "$@"; }

# expect_line WANT ARGS...: zt-run --dry-run ARGS prints exactly WANT on stdout, nothing else.
expect_line() {
  local want=$1; shift
  local got
  got=$(run_clean --dry-run "$@" 2> "$tmp/err")
  if [ "$got" != "$want" ] || [ -s "$tmp/err" ]; then
    fail "zt-run --dry-run $*"; echo "    want: $want"; echo "    got:  $got"; sed 's/^/    err:  /' "$tmp/err"
  else
    echo "ok   zt-run $* -> $got"
  fi
}

root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root "
common="--map-by slot --bind-to none -x PATH"
# zt-train is not on PATH here: zt-run finds it beside itself.
expect_line "mpirun -np 1 ${root}$common $bin/zt-train --config c.json" \
  -np 1 -- zt-train --config c.json
expect_line "mpirun -np 1000 ${root}--oversubscribe $common $bin/zt-train --config c.json" \
  -np 1000 --cpu -- zt-train --config c.json
printf '# two nodes\nnode0 slots=2\nnode1 slots=2\n' > "$tmp/hosts"
keepalive="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3"
expect_line "mpirun -np 4 --hostfile $tmp/hosts ${root}--map-by slot --bind-to none $keepalive -x PATH /bin/true" \
  -np 4 --hostfile "$tmp/hosts" -- /bin/true
expect_line "mpirun -np 5 --hostfile $tmp/hosts ${root}--oversubscribe --map-by slot --bind-to none $keepalive -x PATH /bin/true" \
  -np 5 --hostfile "$tmp/hosts" -- /bin/true
# A variable of the ranks' environment is forwarded; OMP_WAIT_POLICY set by the caller is kept.
got=$(env -i PATH="$path_dirs" OMP_WAIT_POLICY=ACTIVE ZT_TEST_FAULT=x HOME=/ "$bin/zt-run" --dry-run -np 1 -- /bin/true)
[ "$got" = "mpirun -np 1 ${root}--map-by slot --bind-to none -x OMP_WAIT_POLICY -x PATH -x ZT_TEST_FAULT /bin/true" ] ||
  fail "forwarded variables: $got"
# Not root: no --allow-run-as-root (run as nobody when this is root).
if [ -n "$root" ] && command -v setpriv > /dev/null; then
  got=$(setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH="$path_dirs" \
        "$bin/zt-run" --dry-run -np 2 -- /bin/true 2>&1)
  if [ "$got" = "mpirun -np 2 $common /bin/true" ]; then echo "ok   as nobody -> $got"
  else fail "as nobody: $got"; fi
else
  echo "skip the not-root line: not root, or no setpriv"
fi

# Bad input: exit 2 and one line on stderr.
expect_error() {
  local what=$1 pattern=$2; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$? lines
  lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q "^zt-run: .*$pattern" "$tmp/err" || [ -s "$tmp/out" ]; then
    fail "$what: exit $rc, $lines lines:"; sed 's/^/    /' "$tmp/err"
  else
    echo "ok   $what: exit 2, $(cat "$tmp/err")"
  fi
}
expect_error "no mpirun on PATH" "mpirun is not on PATH" env -i PATH=/nonexistent "$bin/zt-run" -np 2 -- /bin/true
expect_error "bad -np" "-np must be a positive integer; got 'two'" "$bin/zt-run" -np two -- /bin/true
expect_error "-np 0" "-np must be a positive integer; got '0'" "$bin/zt-run" -np 0 -- /bin/true
expect_error "no -np" "-np N is required" "$bin/zt-run" -- /bin/true
expect_error "missing --" "missing '--'" "$bin/zt-run" -np 2 /bin/true
expect_error "nothing after --" "no program after '--'" "$bin/zt-run" -np 2 --
expect_error "unknown option" "unknown option '--hosts'" "$bin/zt-run" -np 2 --hosts h -- /bin/true
expect_error "missing hostfile" "cannot read hostfile $tmp/none" "$bin/zt-run" -np 2 --hostfile "$tmp/none" -- /bin/true
printf 'node0 slots=many\n' > "$tmp/bad_hosts"
expect_error "bad slots" "bad_hosts:1: 'slots=many'" "$bin/zt-run" -np 2 --hostfile "$tmp/bad_hosts" -- /bin/true

# A real job: 2 ranks of zt-train on gpt2-tiny, 3 steps.
cd "$src"
data=()
if [ ! -f data/corpus/train.bin ]; then
  tokens=()
  for i in $(seq 0 4095); do tokens+=($(( (i * 7919) % 50257 ))); done
  write_tokens "$tmp/train.bin" 20240520 1 4096 "${tokens[@]}"
  data=(--set zt.train_data="$tmp/train.bin" --set 'zt.val_data=""')
fi
timeout 300 "$bin/zt-run" -np 2 -- zt-train --config configs/gpt2-tiny.json "${data[@]}" \
  --set zt.output_dir="$tmp/job" --set zt.steps=3 --set zt.eval_every=0 \
  > "$tmp/job.out" 2> "$tmp/job.err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '"step":3,' "$tmp/job/metrics.jsonl" 2> /dev/null; then
  fail "zt-run -np 2 -- zt-train: exit $rc, no step 3:"; sed 's/^/    /' "$tmp/job.err" | tail -20
else
  echo "ok   zt-run -np 2 -- zt-train trained 3 steps; $(head -1 "$tmp/job.err")"
  grep -m1 'ranks on this machine' "$tmp/job.out" "$tmp/job.err" | sed 's/^[^:]*:/     /'
fi
head -1 "$tmp/job.err" | grep -q "^zt-run: mpirun -np 2 .*--bind-to none .*zt-train --config configs/gpt2-tiny.json" ||
  fail "the first stderr line is not zt-run's mpirun line: $(head -1 "$tmp/job.err")"
grep -q 'ranks on this machine: 2 ' "$tmp/job.out" "$tmp/job.err" || fail "no start-up line for 2 ranks on this machine"
exit "$failed"
