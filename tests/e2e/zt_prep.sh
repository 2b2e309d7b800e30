#!/usr/bin/env bash
# zt-prep on instruction data (.jsonl), with a byte-level tokenizer.json built here (ids 0..255
# the bytes, 256 <|endoftext|>, 257 <|bos|>): the version 3 file's header, ids and flags exact
# for prompt/completion and messages, greedy packing, --pad, --bos, truncation, the validation
# split by examples and the summary lines; bad instruction data and command lines exit 2 with
# one stderr line naming the problem (file:line for a bad example). --decode-ids on that
# tokenizer: its JSON lines, and file:line for a bad id list.
# zt-prep --tokenizer on text: a tokenizer.json built here (with jq) from data/gpt2's
# encoder.json and vocab.bpe writes the same token files as --vocab data/gpt2 on three chapters
# of data/text, whether given as the file or its directory; bad command lines and tokenizers
# exit 2 with one stderr line: both or neither of --vocab/--tokenizer, a separator the
# vocabulary lacks, a WordPiece tokenizer.json; a vocabulary past 65536 writes a version-2
# (uint32) token file.
# Usage: zt_prep.sh BIN_DIR SOURCE_DIR. Skips (77) without jq; without data/gpt2 or data/text
# it runs the .jsonl cases only, then skips (77) unless one failed.
set -u
bin=$1
src=$2
gpt2=$src/data/gpt2
text=$src/data/text/moby-dick
command -v jq > /dev/null || { echo "no jq"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

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

# --- instruction data -------------------------------------------------------------------

# prep NAME ARGS...: zt-prep ARGS must succeed; its stdout is left in $tmp/stdout.
prep() {
  local name=$1
  shift
  if ! "$bin/zt-prep" "$@" > "$tmp/stdout" 2> "$tmp/stderr"; then
    echo "FAIL $name: zt-prep failed:"; sed 's/^/    /' "$tmp/stderr"
    failures=$((failures + 1))
    return 1
  fi
}

# check NAME ACTUAL EXPECTED
check() {
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: got '$2', want '$3'"
    failures=$((failures + 1))
  fi
}

# The summary lines with the percentages blanked (their rounding is not the point here).
summary() { sed -E 's/\([0-9.]+%\)/(P%)/' "$tmp/stdout"; }
# header_int FILE INDEX; ids FILE FIRST COUNT (uint16 ids); flags FILE NTOKENS FIRST COUNT.
header_int() { od -An -t d4 -j $((4 * $2)) -N 4 "$1" | xargs; }
ids() { od -An -t u2 -j $((1024 + 2 * $2)) -N $((2 * $3)) "$1" | xargs; }
flags() { od -An -t u1 -j $((1024 + 2 * $2 + $3)) -N "$4" "$1" | xargs; }

mkdir "$tmp/bytes"
jq -n '
  def printable: (. >= 33 and . <= 126) or (. >= 161 and . <= 172) or (. >= 174);
  (reduce range(0; 256) as $b ({next: 256, vocab: {}};
     if ($b | printable) then .vocab[[$b] | implode] = $b
     else .vocab[[.next] | implode] = $b | .next += 1 end)) as $alphabet |
  {version: "1.0",
   added_tokens: [{id: 256, content: "<|endoftext|>", special: true},
                  {id: 257, content: "<|bos|>", special: true}],
   normalizer: null,
   pre_tokenizer: {type: "ByteLevel", add_prefix_space: false, trim_offsets: true,
                   use_regex: true},
   post_processor: null,
   decoder: {type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true},
   model: {type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
           end_of_word_suffix: "", fuse_unk: false, byte_fallback: false,
           ignore_merges: false, vocab: $alphabet.vocab, merges: []}}
' > "$tmp/bytes/tokenizer.json" || { echo "FAIL: jq could not build tokenizer.json"; exit 1; }

# Tokens (ids are bytes): "Hi" " there" end = 9; "Say x" "x" end = 7; "### User\n2+2?\n\n" +
# "### Assistant\n" (29) "4" end = 31; in b.jsonl "val" "!" end = 5.
cat > "$tmp/a.jsonl" << 'JSONL'
{"prompt": "Hi", "completion": " there"}
{"prompt": "Say x", "completion": "x", "source": "ignored"}

{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
JSONL
echo '{"prompt": "val", "completion": "!"}' > "$tmp/b.jsonl"

# Greedy, --seq-len 32: block 0 holds 9 + 7 tokens and 16 pads, block 1 the 31 and one pad,
# then the trailing pad: 65 tokens. The last example (b.jsonl's) is the validation split.
if prep "jsonl greedy" --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/i.bin" \
     --val-out "$tmp/iv.bin" --val-fraction 0.25 "$tmp/a.jsonl" "$tmp/b.jsonl"; then
  check "jsonl summary lines" "$(summary)" \
"$tmp/i.bin: 3 examples, 2 blocks of 32 tokens, 11 completion tokens (P%), 17 padding tokens, 0 truncated examples; messages rendered by ### Role (no chat_template in $tmp/bytes)
$tmp/iv.bin: 1 examples, 1 blocks of 32 tokens, 2 completion tokens (P%), 27 padding tokens, 0 truncated examples"
  check "jsonl header" "$(for i in 0 1 2 3 4 5 255; do header_int "$tmp/i.bin" $i; done | xargs)" \
    "20240520 3 65 2 32 0 0"
  check "jsonl size" "$(stat -c %s "$tmp/i.bin")" $((1024 + 65 * 3))
  check "jsonl ids of block 0" "$(ids "$tmp/i.bin" 0 18)" \
    "72 105 32 116 104 101 114 101 256 83 97 121 32 120 120 256 256 256"
  check "jsonl flags of block 0" "$(flags "$tmp/i.bin" 65 0 18)" \
    "2 0 1 1 1 1 1 1 1 2 0 0 0 0 1 1 2 2"
  check "jsonl block 1: the messages' first and last tokens, a pad, the trailing pad" \
    "$(ids "$tmp/i.bin" 32 2) $(ids "$tmp/i.bin" 59 6) / $(flags "$tmp/i.bin" 65 32 2)" \
    "35 35 116 10 52 256 256 256 / 2 0"
  check "jsonl block 1's flags: the assistant's 4 and the end token count" \
    "$(flags "$tmp/i.bin" 65 59 6)" "0 0 1 1 2 2"
  check "jsonl validation split" "$(ids "$tmp/iv.bin" 0 6) / $(flags "$tmp/iv.bin" 33 0 6)" \
    "118 97 108 33 256 256 / 2 0 0 1 1 2"
fi
if prep "jsonl --pad" --tokenizer "$tmp/bytes" --seq-len 32 --pad --out "$tmp/p.bin" \
     "$tmp/a.jsonl"; then
  check "jsonl --pad summary" "$(summary)" \
    "$tmp/p.bin: 3 examples, 3 blocks of 32 tokens, 11 completion tokens (P%), 49 padding tokens, 0 truncated examples; messages rendered by ### Role (no chat_template in $tmp/bytes)"
  check "jsonl --pad: the second example starts block 1" \
    "$(ids "$tmp/p.bin" 32 2) / $(flags "$tmp/p.bin" 97 30 3)" "83 97 / 2 2 2"
fi
if prep "jsonl --bos" --tokenizer "$tmp/bytes" --seq-len 32 --bos '<|bos|>' --out "$tmp/b.bin" \
     "$tmp/a.jsonl"; then
  check "jsonl --bos: first, not trained on" \
    "$(ids "$tmp/b.bin" 0 3) / $(flags "$tmp/b.bin" 65 0 3)" "257 72 105 / 2 0 0"
fi
# --seq-len 8: "Hi there" loses its end token, the messages keep only "### User".
if prep "jsonl truncation" --tokenizer "$tmp/bytes" --seq-len 8 --out "$tmp/t.bin" \
     "$tmp/a.jsonl"; then
  check "jsonl truncation summary" "$(summary)" \
    "$tmp/t.bin: 3 examples, 3 blocks of 8 tokens, 8 completion tokens (P%), 1 padding tokens, 2 truncated examples, 1 examples without completion tokens (the first at $tmp/a.jsonl:4); messages rendered by ### Role (no chat_template in $tmp/bytes)"
fi

printf '{"prompt": "a", "completion": "b"}\n{"prompt": "a", completion: "b"}\n' > "$tmp/bad.jsonl"
refused "jsonl not JSON" "bad.jsonl:2: not JSON: parse error" \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" "$tmp/bad.jsonl"
echo '{"messages": [{"role": "tool", "content": "x"}]}' > "$tmp/role.jsonl"
refused "jsonl unknown role" \
  'role.jsonl:1: messages\[0\].role "tool" is not system, user or assistant' \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" "$tmp/role.jsonl"
echo '{"text": "x"}' > "$tmp/text.jsonl"
refused "jsonl neither form" 'text.jsonl:1: has neither "prompt" and "completion" nor "messages"' \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" "$tmp/text.jsonl"
: > "$tmp/empty.jsonl"
refused "jsonl empty file" "empty.jsonl: no examples" \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" "$tmp/a.jsonl" "$tmp/empty.jsonl"
echo "plain text" > "$tmp/plain.txt"
refused "jsonl mixed with text" "mix instruction data \(.*a.jsonl\) and text \(.*plain.txt\)" \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" "$tmp/a.jsonl" "$tmp/plain.txt"
refused "jsonl without --seq-len" "needs --seq-len" \
  --tokenizer "$tmp/bytes" --out "$tmp/y.bin" "$tmp/a.jsonl"
refused "jsonl --seq-len 0" "--seq-len must be 1" \
  --tokenizer "$tmp/bytes" --seq-len 0 --out "$tmp/y.bin" "$tmp/a.jsonl"
refused "--pad on text" "apply to instruction data \(.jsonl inputs\) only" \
  --tokenizer "$tmp/bytes" --pad --out "$tmp/y.bin" "$tmp/plain.txt"
refused "jsonl unknown --bos" 'no token "<\|nope\|>" to begin examples; name one with --bos' \
  --tokenizer "$tmp/bytes" --seq-len 32 --bos '<|nope|>' --out "$tmp/y.bin" "$tmp/a.jsonl"
refused "jsonl --val-fraction of one example" "of 1 examples leaves none for --out" \
  --tokenizer "$tmp/bytes" --seq-len 32 --out "$tmp/y.bin" --val-out "$tmp/yv.bin" \
  --val-fraction 0.5 "$tmp/b.jsonl"
if [ -e "$tmp/y.bin" ]; then
  echo "FAIL: a refused run wrote y.bin"
  failures=$((failures + 1))
fi

# --- --decode-ids ------------------------------------------------------------------------

# "Hi", then the first three bytes of U+1F600 (one U+FFFD), <|endoftext|> (special).
printf '[72, 105, 240, 159, 152, 256]\n\n[]\n' > "$tmp/ids.txt"
if prep "--decode-ids" --tokenizer "$tmp/bytes" --decode-ids "$tmp/ids.txt"; then
  check "--decode-ids: two lines, U+FFFD for a cut character, special token kept and skipped" \
    "$(jq -c '[.decode, .decode_skip_special, .display, .ids]' "$tmp/stdout" | tr '\n' ' ')" \
    '["Hi�<|endoftext|>","Hi�","Hi�<|endoftext|>",[72,105,240,159,152,256]] ["","","",[]] '
fi
echo '[1, "x"]' > "$tmp/bad_ids.txt"
refused "--decode-ids not ids" "bad_ids.txt:1: expected a JSON array of token ids" \
  --tokenizer "$tmp/bytes" --decode-ids "$tmp/bad_ids.txt"
printf '[1]\n[258]\n' > "$tmp/big_ids.txt"
refused "--decode-ids id past the vocabulary" \
  "big_ids.txt:2: token id 258 is outside the vocabulary \[0, 258\)" \
  --tokenizer "$tmp/bytes" --decode-ids "$tmp/big_ids.txt"
refused "--decode-ids with --out" "--decode-ids writes no file; drop --out" \
  --tokenizer "$tmp/bytes" --decode-ids --out "$tmp/y.bin" "$tmp/ids.txt"

# --- chat data with the tokenizer directory's chat template ---------------------------------
# chat_template.jinja beside the byte tokenizer; its special tokens <|bos|> (257) and
# <|endoftext|> (256) are ids, the loss is on "4<|endoftext|>\n", no end token follows, and the
# pads are the template's eos_token. Tokens: <|bos|> "user: 2+2?" (10) 256 "\n" "assistant: "
# (11) "4" 256 "\n" = 27, then 5 pads.
mkdir "$tmp/chat"
cp "$tmp/bytes/tokenizer.json" "$tmp/chat/"
echo '{"bos_token": "<|bos|>", "eos_token": "<|endoftext|>"}' > "$tmp/chat/tokenizer_config.json"
cat > "$tmp/chat/chat_template.jinja" << 'JINJA'
{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}<|endoftext|>
{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}
JINJA
echo '{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}' \
  > "$tmp/c.jsonl"
if prep "chat template" --tokenizer "$tmp/chat" --seq-len 32 --out "$tmp/c.bin" "$tmp/c.jsonl"; then
  check "chat template summary" "$(summary)" \
    "$tmp/c.bin: 1 examples, 1 blocks of 32 tokens, 3 completion tokens (P%), 5 padding tokens, 0 truncated examples; messages rendered by $tmp/chat/chat_template.jinja"
  check "chat template: BOS and end-of-turn as special ids, the reply's mask, the pads" \
    "$(ids "$tmp/c.bin" 0 3) $(ids "$tmp/c.bin" 10 4) $(ids "$tmp/c.bin" 24 4) / $(flags "$tmp/c.bin" 33 22 7)" \
    "257 117 115 63 256 10 97 52 256 10 256 / 0 0 1 1 1 2 2"
fi
if prep "chat template --bos" --tokenizer "$tmp/chat/tokenizer.json" --seq-len 32 --bos '<|bos|>' \
     --out "$tmp/cb.bin" "$tmp/c.jsonl"; then
  check "chat template --bos: the template's BOS is not doubled" \
    "$(ids "$tmp/cb.bin" 0 2) $(header_int "$tmp/cb.bin" 2)" "257 117 33"
fi
if prep "--template builtin" --tokenizer "$tmp/chat" --template builtin --seq-len 32 \
     --out "$tmp/cr.bin" "$tmp/c.jsonl"; then
  check "--template builtin summary" "$(summary | sed 's/.*; //')" \
    "messages rendered by ### Role (--template builtin)"
  check "--template builtin: ### headers" "$(ids "$tmp/cr.bin" 0 3)" "35 35 35"
fi
echo '{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}' > "$tmp/count.jinja"
refused "chat template whose prefixes do not match" \
  'c.jsonl:1: the chat template .*count.jinja renders messages\[0..1\) with the generation prompt \(where reply 1 begins\) as text that is not the start of the whole conversation' \
  --tokenizer "$tmp/chat" --template "$tmp/count.jinja" --seq-len 32 --out "$tmp/y.bin" \
  "$tmp/c.jsonl"
refused "--template on text" "apply to instruction data" \
  --tokenizer "$tmp/chat" --template builtin --out "$tmp/y.bin" "$tmp/plain.txt"

# --- text -------------------------------------------------------------------------------
if ! [ -f "$gpt2/encoder.json" ] || ! [ -f "$gpt2/vocab.bpe" ] || ! [ -d "$text" ]; then
  [ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
  echo "the .jsonl cases passed; no data/gpt2 or data/text for the rest: run scripts/fetch_data.sh"
  exit 77
fi
docs=("$text/chapter_1.txt" "$text/chapter_2.txt" "$text/chapter_3.txt")

bash "$src/scripts/gpt2_tokenizer_json.sh" "$gpt2" "$tmp/tok" ||
  { echo "FAIL: could not build tokenizer.json"; exit 1; }

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
