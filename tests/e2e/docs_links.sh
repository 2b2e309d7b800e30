#!/usr/bin/env bash
# The repository's documentation holds together on its own:
#   - every relative Markdown link in README.md and docs/**/*.md names a file or folder that
#     exists inside the repository, and an anchor (#section) into a Markdown page names one of
#     its headings, slugged as GitHub does (lower case, punctuation dropped, spaces to '-', a
#     repeated heading suffixed -1, -2, ...); http(s) and mailto links are not followed; fenced
#     code blocks are skipped;
#   - README.md is at most 260 lines and links docs/architecture.md, which exists;
#   - no .md, .cpp, .h, .cu, .cuh, .sh or CMakeLists.txt file outside build*/, data/ and runs/
#     points outside the repository: none names the design folder the project started from
#     (the words this test looks for are assembled below, so that this file does not name them).
# Usage: docs_links.sh BIN_DIR SOURCE_DIR (BIN_DIR unused: nothing is built or run). Exit 0 when
# everything holds, 1 naming every problem found.
set -u
src=${2:?usage: docs_links.sh BIN_DIR SOURCE_DIR}
cd "$src" || exit 1
root=$(pwd -P)
problems=0
fail() { echo "docs_links: $*"; problems=$((problems + 1)); }

# The anchors of a Markdown page's headings (outside fenced code), one per line.
anchors() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence || !/^#+[ \t]/ { next }
    {
      h = tolower($0)
      sub(/^#+[ \t]+/, "", h)
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      n = seen[h]++
      print (n ? h "-" n : h)
    }' "$1"
}

readme_max=260
[ -f README.md ] || { fail "README.md is missing"; exit 1; }
lines=$(wc -l < README.md)
[ "$lines" -le "$readme_max" ] || fail "README.md has $lines lines (at most $readme_max)"
[ -f docs/architecture.md ] || fail "docs/architecture.md is missing"
grep -q '](docs/architecture\.md' README.md || fail "README.md does not link docs/architecture.md"

# Every relative link of every page: "FILE:LINE: TARGET" for targets that do not resolve.
checked=0
while IFS= read -r page; do
  dir=$(dirname "$page")
  # Link targets outside fenced code blocks, one per line as "LINE<TAB>TARGET".
  while IFS=$'\t' read -r number target; do
    [ -n "$target" ] || continue
    case "$target" in
      http://* | https://* | mailto:*) continue ;;
    esac
    anchor=""
    case "$target" in *'#'*) anchor=${target#*#} ;; esac
    path=${target%%#*}         # drop an anchor
    path=${path%% *}           # drop a title: (file "title")
    path=${path#<}; path=${path%>}
    if [ -z "$path" ]; then    # an anchor into this page
      checked=$((checked + 1))
      anchors "$page" | grep -qxF -- "$anchor" || fail "$page:$number: '$target': no such heading here"
      continue
    fi
    checked=$((checked + 1))
    case "$path" in
      /*) fail "$page:$number: '$target' is an absolute path"; continue ;;
    esac
    resolved=$(realpath -m "$dir/$path")
    case "$resolved/" in
      "$root"/*) ;;
      *) fail "$page:$number: '$target' points outside the repository"; continue ;;
    esac
    if [ ! -e "$resolved" ]; then
      fail "$page:$number: '$target' does not exist"
    elif [ -n "$anchor" ] && [ -f "$resolved" ] && [[ $resolved == *.md ]] &&
         ! anchors "$resolved" | grep -qxF -- "$anchor"; then
      fail "$page:$number: '$target': no heading '#$anchor' in ${resolved#"$root"/}"
    fi
  done < <(awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      while (match(line, /\]\([^)]*\)/)) {
        print NR "\t" substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$page")
done < <({ echo README.md; [ -d docs ] && find docs -name '*.md' -type f; } | sort)
[ "$checked" -gt 0 ] || fail "no relative link found in README.md or docs/: is this the source tree?"

# Nothing points outside the repository.
# The notes kept beside the checkout, never in it: the architecture sketch, the style guide and
# the machine notes (spelled in halves so that this file does not match itself).
outside="shared""/"
design="DESIGN"".md"
style="STYLE"".md"
machine="MACHINE"".md"
while IFS= read -r hit; do
  fail "$hit (points outside the repository; the architecture is docs/architecture.md)"
done < <(find . \( -path ./.git -o -path './build*' -o -path ./data -o -path ./runs \) -prune -o \
           -type f \( -name '*.md' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
           -o -name '*.sh' -o -name CMakeLists.txt \) -print0 |
         xargs -0 grep -n -F -e "$outside" -e "$design" -e "$style" -e "$machine" 2>/dev/null)

if [ "$problems" -gt 0 ]; then
  echo "docs_links: $problems problem(s)"
  exit 1
fi
echo "docs_links: $checked relative links resolve; README.md $lines lines; nothing points outside"
