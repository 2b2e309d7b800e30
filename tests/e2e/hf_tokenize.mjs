// hf_tokenize.mjs: compares zt-prep --print-ids with Hugging Face's JavaScript tokenizers
// (@huggingface/tokenizers) for tests/e2e/hf_tokenizers.sh.
// Usage: node hf_tokenize.mjs TOKENIZERS_MJS TOKENIZER_DIR ZT_JSONL
//   TOKENIZERS_MJS  path of @huggingface/tokenizers' dist/tokenizers.mjs
//   TOKENIZER_DIR   holds tokenizer.json (and tokenizer_config.json)
//   ZT_JSONL        zt-prep --print-ids output: {"file", "ids", "text"} per input
// For each input file it encodes the text as Hugging Face does by default (special tokens
// matched and added), decodes those ids (special tokens kept, no clean-up of spaces), and
// checks that zt-prep's ids and decoded text are the same. Prints one line per input and a
// summary; exits 1 on any difference.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modulePath, tokenizerDir, ztPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(path.resolve(modulePath)).href);
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const configPath = path.join(tokenizerDir, "tokenizer_config.json");
const tokenizer = new Tokenizer(
  readJson(path.join(tokenizerDir, "tokenizer.json")),
  fs.existsSync(configPath) ? readJson(configPath) : {},
);

const name = path.basename(tokenizerDir);
const lines = fs.readFileSync(ztPath, "utf8").split("\n").filter((line) => line.length > 0);
let failures = 0;
let tokens = 0;
// A few tokens around index `at`, as their strings.
const around = (ids, at) =>
  JSON.stringify(ids.slice(Math.max(0, at - 3), at + 4).map((id) => tokenizer.id_to_token(id)));
for (const line of lines) {
  const zt = JSON.parse(line);
  const text = fs.readFileSync(zt.file, "utf8");
  const ids = tokenizer.encode(text).ids;
  const decoded =
    ids.length === 0 ? "" : tokenizer.decode(ids, { clean_up_tokenization_spaces: false });
  const shortName = `${name} ${path.basename(zt.file)}`;
  let at = 0;
  while (at < ids.length && at < zt.ids.length && ids[at] === zt.ids[at]) ++at;
  if (at < ids.length || at < zt.ids.length) {
    console.log(
      `FAIL ${shortName}: ${zt.ids.length} ids, Hugging Face ${ids.length}; first difference ` +
        `at ${at}: zt ${JSON.stringify(zt.ids.slice(at, at + 4))} ${around(zt.ids, at)}, ` +
        `Hugging Face ${JSON.stringify(ids.slice(at, at + 4))} ${around(ids, at)}`,
    );
    ++failures;
  } else if (decoded !== zt.text) {
    let c = 0;
    while (c < decoded.length && decoded[c] === zt.text[c]) ++c;
    console.log(
      `FAIL ${shortName}: same ${ids.length} ids, decoded text differs at character ${c}: ` +
        `zt ${JSON.stringify(zt.text.slice(c, c + 20))}, ` +
        `Hugging Face ${JSON.stringify(decoded.slice(c, c + 20))}`,
    );
    ++failures;
  } else {
    tokens += ids.length;
    console.log(`ok   ${shortName}: ${ids.length} ids equal, decoded text equal` +
      (decoded === text ? " (and equal to the input)" : ""));
  }
}
console.log(`${name}: ${lines.length} texts, ${tokens} tokens equal, ${failures} differ`);
process.exit(failures === 0 && lines.length > 0 ? 0 : 1);
