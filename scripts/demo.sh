#!/usr/bin/env bash
# The main job from a fresh clone: install what is missing, build, fetch the corpus and the
# GPT-2 tokenizer, then train the tiny GPT-2 on real English text on 2 processes with ZeRO
# stage 2, one progress line per step, and draw the run's curves (zt-plot: loss, learning rate,
# gradient norm, tokens/s, peak memory) into <zt.output_dir>/metrics.png. Extra arguments go to
# zt-train (e.g. --set zt.steps=100). ZT_RANKS sets the number of processes (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/fetch_data.sh
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
mpirun "${mpi_flags[@]}" -np "${ZT_RANKS:-2}" \
  build/bin/zt-train --config configs/gpt2-tiny.json "$@"
out=runs/gpt2-tiny  # the config's zt.output_dir, unless an argument sets another
for arg in "$@"; do [[ $arg == zt.output_dir=* ]] && out=${arg#zt.output_dir=}; done
build/bin/zt-plot "$out"
