#!/usr/bin/env bash
# Every C++ and CUDA source in the repository follows .clang-format (clang-format --dry-run
# --Werror), each violation named file:line. clang-format 14, Debian 12's, is the reference:
# another major version may format differently. Skips (77) when clang-format is not installed
# (scripts/install_deps.sh installs it). Usage: format.sh BIN_DIR SOURCE_DIR.
set -u
src=$2
command -v clang-format > /dev/null ||
  { echo "clang-format is not installed (scripts/install_deps.sh installs it)"; exit 77; }
cd "$src" || exit 2
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . \( -path ./build -o -path ./data -o -path ./.git \) -prune -o \
    -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
[ "${#files[@]}" -gt 0 ] || { echo "format: no source file found under $src"; exit 1; }
if out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  echo "format: ${#files[@]} files follow .clang-format ($(clang-format --version))"
  exit 0
fi
echo "$out" | grep 'error:' | head -n 40
echo "format: $(echo "$out" | grep -c 'error:') lines differ from .clang-format; run clang-format -i on the files named"
exit 1
