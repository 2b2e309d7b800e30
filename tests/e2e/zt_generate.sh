#!/usr/bin/env bash
# zt-generate as a user runs it, on a tiny Llama pre-trained here for 20 steps (2 ranks) and
# saved as a Hugging Face directory (fp32) with GPT-2's tokenizer.json, and as a checkpoint:
#   - greedy answers to two prompts from the directory on one process, from the directory under
#     mpirun -np 2 (ZeRO stage 3: each unit gathered as it is used), and from the checkpoint
#     with its job config: the same token ids;
#   - sampling (temperature, top-p, seed) twice: the same ids;
#   - --prompts with completions: every line scored; --chat with a ChatML template: the prompt
#     is the template's rendering, tokenised;
#   - bad input (a missing directory, a bad prompts line, --chat without a template): exit 2 and
#     one line naming the file.
# Usage: zt_generate.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun, the corpus or jq.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v jq > /dev/null || { echo "skip: no jq"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] && [ -f "$src/data/gpt2/encoder.json" ] ||
  { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }

job=(--config configs/llama-tiny-pretrain.json --set zt.steps=20 --set zt.eval_every=0
     --set zt.seq_len=32 --set scheduler.params.total_num_steps=20
     --set zt.output_dir="$tmp/run" --set zt.checkpoint.dir="$tmp/ckpt"
     --set zt.checkpoint.every_n_steps=20)
"$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" "${job[@]}" \
  --set zt.save_pretrained="{\"dir\": \"$tmp/base\", \"dtype\": \"fp32\"}" \
  > "$tmp/train.out" 2> "$tmp/train.err" || { fail "pre-training: $(tail -2 "$tmp/train.err")"; exit 1; }
bash scripts/gpt2_tokenizer_json.sh data/gpt2 "$tmp/base" || { fail "tokenizer.json"; exit 1; }

prompts=(--prompt "It was the best of times" --prompt "Call me Ishmael." --max-new-tokens 16)
ids() { jq -c '[.prompts[].ids]' "$1"; }
"$bin/zt-generate" --model "$tmp/base" "${prompts[@]}" --json "$tmp/one.json" > "$tmp/one.out" 2> "$tmp/one.err" ||
  fail "one process: $(cat "$tmp/one.err")"
echo "one process: $(tail -1 "$tmp/one.err")"
[ "$(jq '[.prompts[].ids | length] | min' "$tmp/one.json")" -ge 1 ] || fail "no tokens generated"
"$bin/zt-run" -np 2 --cpu -- "$bin/zt-generate" --model "$tmp/base" "${prompts[@]}" \
  --json "$tmp/two.json" > /dev/null 2> "$tmp/two.err" || fail "2 ranks: $(tail -2 "$tmp/two.err")"
[ "$(ids "$tmp/two.json")" = "$(ids "$tmp/one.json")" ] ||
  fail "stage 3 on 2 ranks generated other tokens: $(ids "$tmp/two.json") vs $(ids "$tmp/one.json")"
"$bin/zt-generate" "${job[@]}" --checkpoint --tokenizer "$tmp/base" "${prompts[@]}" \
  --json "$tmp/ckpt.json" > /dev/null 2> "$tmp/ckpt.err" || fail "checkpoint: $(cat "$tmp/ckpt.err")"
[ "$(ids "$tmp/ckpt.json")" = "$(ids "$tmp/one.json")" ] ||
  fail "the checkpoint generated other tokens than its export"
echo "greedy: the same $(jq '[.prompts[].ids | length] | add' "$tmp/one.json") tokens from the directory on 1 and 2 ranks and from the checkpoint"

sample=(--temperature 0.8 --top-p 0.9 --seed 5)
for k in 1 2; do
  "$bin/zt-generate" --model "$tmp/base" "${prompts[@]}" "${sample[@]}" --json "$tmp/s$k.json" \
    > /dev/null 2>&1 || fail "sampling run $k"
done
[ "$(ids "$tmp/s1.json")" = "$(ids "$tmp/s2.json")" ] || fail "sampling with one seed differs"

bash scripts/sums_jsonl.sh 3 9 > "$tmp/sums.jsonl"
"$bin/zt-generate" --model "$tmp/base" --prompts "$tmp/sums.jsonl" --max-new-tokens 4 \
  --json "$tmp/sums.json" > /dev/null 2> "$tmp/sums.err" || fail "--prompts: $(cat "$tmp/sums.err")"
[ "$(jq '.exact_match.scored' "$tmp/sums.json")" = 3 ] || fail "not every completion scored"
grep -q 'exact match [0-9]*/3' "$tmp/sums.err" || fail "no exact-match summary: $(cat "$tmp/sums.err")"

mkdir "$tmp/chat" && cp "$tmp/base"/* "$tmp/chat/"
cat > "$tmp/chat/chat_template.jinja" << 'JINJA'
{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
JINJA
"$bin/zt-generate" --model "$tmp/chat" --chat --system "Be brief." --prompt "Hello" \
  --max-new-tokens 4 --json "$tmp/chat.json" > /dev/null 2> "$tmp/chat.err" || fail "--chat: $(cat "$tmp/chat.err")"
want='"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"'
[ "$(jq '.prompts[0].prompt_text' "$tmp/chat.json")" = "$want" ] || fail "--chat rendered $(jq '.prompts[0].prompt_text' "$tmp/chat.json")"

expect_bad() {  # WHAT PATTERN ARGS...: exit 2 and one stderr line matching PATTERN
  local what=$1 pattern=$2
  shift 2
  "$bin/zt-generate" "$@" > /dev/null 2> "$tmp/bad.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, want 2"
  [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] && grep -q -- "$pattern" "$tmp/bad.err" ||
    fail "$what: stderr '$(cat "$tmp/bad.err")' does not name $pattern"
}
expect_bad "missing directory" "$tmp/none" --model "$tmp/none" --prompt x
printf '{"prompt": "a"}\n{"prompt": 3}\n' > "$tmp/bad.jsonl"
expect_bad "bad prompts line" "bad.jsonl:2" --model "$tmp/base" --prompts "$tmp/bad.jsonl"
expect_bad "--chat without a template" "$tmp/base" --model "$tmp/base" --chat --prompt x
expect_bad "top-p" "top_p" --model "$tmp/base" --prompt x --top-p 0
[ $failed -eq 0 ] && echo "zt-generate: ok"
exit $failed
