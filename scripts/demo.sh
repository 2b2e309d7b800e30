#!/usr/bin/env bash
# The main job from a fresh clone: install what is missing, build, fetch the corpus and the
# GPT-2 tokenizer, then train the tiny GPT-2 on real English text with a progress line per
# `steps_per_print` steps. Extra arguments go to zt-train (e.g. --set zt.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/fetch_data.sh
exec build/bin/zt-train --config configs/gpt2-tiny.json "$@"
