#!/usr/bin/env bash
# Every test suite from a fresh clone: install what is missing, build, fetch the corpus (the
# end-to-end tests train on it) and the public tokenizer.json files the tokenizer and chat-mask
# tests compare with (a failed fetch only makes those tests skip, naming why), run CTest. What
# .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/fetch_data.sh
scripts/fetch_tokenizers.sh ||
  echo "test.sh: scripts/fetch_tokenizers.sh failed; the tests that need its files will skip"
cd build
ctest --output-on-failure --timeout 900 "$@"
