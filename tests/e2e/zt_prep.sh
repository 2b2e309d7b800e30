#!/usr/bin/env bash
# zt-prep --tokenizer: a tokenizer.json built here (with jq) from data/gpt2's encoder.json and
# vocab.bpe writes the same token files as --vocab data/gpt2 on three chapters of data/text,
# whether given as the file or its directory; bad command lines and tokenizers exit 2 with one
# stderr line: both or neither of --vocab/--tokenizer, a separator the vocabulary lacks, a
# WordPiece tokenizer.json; a vocabulary past 65536 writes a version-2 (uint32) token file.
# Usage: zt_prep.sh BIN_DIR SOURCE_DIR. Skips (77) without data/gpt2, data/text or jq.
set -u
bin=$1
src=$2
gpt2=$src/data/gpt2
text=$src/data/text/moby-dick
[ -f "$gpt2/encoder.json" ] && [ -f "$gpt2/vocab.bpe" ] && [ -d "$text" ] ||
  { echo "no data/gpt2 or data/text: run scripts/fetch_data.sh"; exit 77; }
command -v jq > /dev/null || { echo "no jq"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
docs=("$text/chapter_1.txt" "$text/chapter_2.txt" "$text/chapter_3.txt")

mkdir "$tmp/tok"
jq -n --slurpfile vocab "$gpt2/encoder.json" --rawfile merges "$gpt2/vocab.bpe" '{
  version: "1.0",
  added_tokens: [{id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false,
                  rstrip: false, normalized: true, special: true}],
  normalizer: null,
  pre_tokenizer: {type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true},
  post_processor: {type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true},
  decoder: {type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true},
  model: {type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
          end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false,
          vocab: $vocab[0],
          merges: ($merges | split("\n") | .[1:] | map(select(length > 0)))}
}' > "$tmp/tok/tokenizer.json" || { echo "FAIL: jq could not build tokenizer.json"; exit 1; }

# same NAME ARGS...: zt-prep ARGS writes $tmp/x.bin and $tmp/xv.bin equal to the --vocab run's.
same() {
  local name=$1
  shift
  rm -f "$tmp/x.bin" "$tmp/xv.bin"
  if ! "$bin/zt-prep" "$@" --out "$tmp/x.bin" --val-out "$tmp/xv.bin" --val-fraction 0.34 \
       "${docs[@]}" > "$tmp/stdout" 2> "$tmp/stderr"; then
    echo "FAIL $name: zt-prep failed:"; sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
  elif ! cmp -s "$tmp/x.bin" "$tmp/gpt2.bin" || ! cmp -s "$tmp/xv.bin" "$tmp/gpt2v.bin"; then
    echo "FAIL $name: token files differ from --vocab's"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(tr '\n' ' ' < "$tmp/stdout")"
  fi
}

# refused NAME PATTERN ARGS...: zt-prep ARGS must exit 2 with one stderr line matching PATTERN.
refused() {
  local name=$1 pattern=$2
  shift 2
  "$bin/zt-prep" "$@" > "$tmp/stdout" 2> "$tmp/stderr"
  local rc=$? lines
  lines=$(wc -l < "$tmp/stderr")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -Eq -- "$pattern" "$tmp/stderr"; then
    echo "FAIL $name: exit $rc, $lines stderr lines, want exit 2 and one line matching '$pattern':"
    sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(cat "$tmp/stderr")"
  fi
}

"$bin/zt-prep" --vocab "$gpt2" --out "$tmp/gpt2.bin" --val-out "$tmp/gpt2v.bin" \
  --val-fraction 0.34 "${docs[@]}" > /dev/null 2> "$tmp/stderr" ||
  { echo "FAIL: zt-prep --vocab failed:"; cat "$tmp/stderr"; exit 1; }

same "tokenizer.json directory" --tokenizer "$tmp/tok"
same "tokenizer.json file" --tokenizer "$tmp/tok/tokenizer.json"
same "explicit separator" --tokenizer "$tmp/tok" --separator '<|endoftext|>'

refused "both tokenizers" "exactly one of --vocab and --tokenizer" \
  --vocab "$gpt2" --tokenizer "$tmp/tok" --out "$tmp/y.bin" "${docs[0]}"
refused "no tokenizer" "exactly one of --vocab and --tokenizer" --out "$tmp/y.bin" "${docs[0]}"
refused "missing separator" 'no token "<\|end_of_text\|>".*--separator' \
  --tokenizer "$tmp/tok" --separator '<|end_of_text|>' --out "$tmp/y.bin" "${docs[0]}"

# 15280 special tokens after GPT-2's: 65537 tokens, one more than uint16 ids can name. With
# the last as the separator, the file is version 2 (uint32 ids); the text's ids are GPT-2's.
mkdir "$tmp/big"
jq '.added_tokens += [range(50257; 65537) | {id: ., content: "<|extra_\(.)|>", special: true}]' \
  "$tmp/tok/tokenizer.json" > "$tmp/big/tokenizer.json"
if "$bin/zt-prep" --tokenizer "$tmp/big" --separator '<|extra_65536|>' --out "$tmp/wide.bin" \
     "${docs[@]}" > /dev/null 2> "$tmp/stderr"; then
  version=$(od -An -t d4 -j 4 -N 4 "$tmp/wide.bin" | tr -d ' ')
  count=$(od -An -t d4 -j 8 -N 4 "$tmp/wide.bin" | tr -d ' ')
  first=$(od -An -t u4 -j 1024 -N 4 "$tmp/wide.bin" | tr -d ' ')
  size=$(stat -c %s "$tmp/wide.bin")
  if [ "$version" = 2 ] && [ "$first" = 65536 ] && [ "$size" -eq $((1024 + 4 * count)) ]; then
    echo "ok   vocabulary above uint16: version 2, $count uint32 ids, the separator 65536 first"
  else
    echo "FAIL vocabulary above uint16: version '$version', first id '$first', $size bytes for $count ids"
    failures=$((failures + 1))
  fi
else
  echo "FAIL vocabulary above uint16: zt-prep failed: $(cat "$tmp/stderr")"
  failures=$((failures + 1))
fi

mkdir "$tmp/wp"
jq '.model.type = "WordPiece"' "$tmp/tok/tokenizer.json" > "$tmp/wp/tokenizer.json"
refused "WordPiece" "wp/tokenizer.json: model.type 'WordPiece' is not supported" \
  --tokenizer "$tmp/wp/tokenizer.json" --out "$tmp/y.bin" "${docs[0]}"

[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "all zt-prep cases passed"
