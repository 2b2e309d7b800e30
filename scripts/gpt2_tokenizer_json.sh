#!/usr/bin/env bash
# gpt2_tokenizer_json.sh GPT2_DIR OUT_DIR: GPT-2's tokenizer as a Hugging Face tokenizer.json
# (byte-level BPE: GPT2_DIR's encoder.json as the vocabulary, vocab.bpe as the merges,
# <|endoftext|> as the one added token), with a tokenizer_config.json beside it that makes
# AutoTokenizer load it as a fast tokenizer ending sequences with <|endoftext|>. For models
# trained here on GPT-2's ids (the Llama demo's) and for the tests that check zt-prep --tokenizer
# against --vocab. Needs jq.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: gpt2_tokenizer_json.sh GPT2_DIR OUT_DIR" >&2; exit 2; }
gpt2=$1 out=$2
command -v jq > /dev/null || { echo "gpt2_tokenizer_json.sh: jq not found (apt-get install jq)" >&2; exit 1; }
for f in encoder.json vocab.bpe; do
  [ -f "$gpt2/$f" ] || { echo "gpt2_tokenizer_json.sh: $gpt2/$f not found (scripts/fetch_data.sh)" >&2; exit 1; }
done
mkdir -p "$out"
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
}' > "$out/tokenizer.json.tmp"
mv "$out/tokenizer.json.tmp" "$out/tokenizer.json"
cat > "$out/tokenizer_config.json" <<'JSON'
{
  "tokenizer_class": "PreTrainedTokenizerFast",
  "bos_token": "<|endoftext|>",
  "eos_token": "<|endoftext|>",
  "unk_token": "<|endoftext|>",
  "model_max_length": 1024,
  "clean_up_tokenization_spaces": false
}
JSON
