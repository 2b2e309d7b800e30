#!/usr/bin/env bash
# Every test suite from a fresh clone: install what is missing, build, fetch the corpus (the
# end-to-end tests train on it), run CTest. What .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/fetch_data.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
