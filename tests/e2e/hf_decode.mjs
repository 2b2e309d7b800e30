// hf_decode.mjs: zt-prep --decode-ids against Hugging Face's decode (tests/e2e/hf_tokenizers.sh).
// Usage:
//   node hf_decode.mjs cases RUST_DIR TOKENIZER_DIR TEXT_FILE > IDS_FILE
//     encodes the text with the Rust `tokenizers` (special tokens matched and added) and
//     prints id lists that cut its characters: every prefix of the ids (a generator decoding
//     its output so far), every id alone (token by token), and every window of 2 or 3 ids.
//   node hf_decode.mjs compare RUST_DIR PORT_MJS TOKENIZER_DIR ZT_JSONL
//     for each line of zt-prep --decode-ids: "decode" and "decode_skip_special" must equal the
//     Rust tokenizers' decode(ids, skip_special_tokens) byte for byte; "display" and
//     "display_skip_special" must equal the JavaScript port's decode, which applies
//     tokenizer_config.json's clean_up_tokenization_spaces as transformers does. Where the
//     port's own decode differs from the Rust one (its ByteFallback gives one U+FFFD per
//     maximal subpart, the Rust one per byte: ids holding a <0xNN> token whose Rust decoding
//     has a U+FFFD) the display is not compared; any other difference between the two is a
//     failure. Exits 1 on any failure.
//   node hf_decode.mjs refuses RUST_DIR TOKENIZER_JSON
//     exits 0 when the Rust tokenizers refuses to load the file.
// RUST_DIR holds the npm package `tokenizers` (its index.js); PORT_MJS is
// @huggingface/tokenizers' dist/tokenizers.mjs.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [mode, rustDir, ...args] = process.argv.slice(2);
const { Tokenizer: RustTokenizer } = createRequire(import.meta.url)(path.resolve(rustDir));
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));

function printCases(tokenizerDir, textFile) {
  return RustTokenizer.fromFile(path.join(tokenizerDir, "tokenizer.json"))
    .encode(fs.readFileSync(textFile, "utf8"))
    .then((encoding) => {
      const ids = Array.from(encoding.getIds());
      const lines = [];
      for (let end = 1; end <= ids.length; ++end) lines.push(ids.slice(0, end));
      for (let begin = 0; begin < ids.length; ++begin) {
        for (const length of [1, 2, 3]) {
          if (begin + length <= ids.length) lines.push(ids.slice(begin, begin + length));
        }
      }
      process.stdout.write(lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
    });
}

async function compare(portPath, tokenizerDir, ztPath) {
  const { Tokenizer: PortTokenizer } = await import(pathToFileURL(path.resolve(portPath)).href);
  const configPath = path.join(tokenizerDir, "tokenizer_config.json");
  const json = readJson(path.join(tokenizerDir, "tokenizer.json"));
  const rust = RustTokenizer.fromFile(path.join(tokenizerDir, "tokenizer.json"));
  const port = new PortTokenizer(json, fs.existsSync(configPath) ? readJson(configPath) : {});
  const byteFallback = JSON.stringify(json.decoder ?? null).includes('"ByteFallback"');
  const byteTokens = new Set(Object.entries(json.model.vocab)
    .filter(([token]) => /^<0x[0-9A-Fa-f]{2}>$/.test(token)).map(([, id]) => id));
  // The one known difference of the port: a run of <0xNN> tokens that is not UTF-8.
  const knownDifference = (ids, rustText) =>
    byteFallback && rustText.includes("\uFFFD") && ids.some((id) => byteTokens.has(id));
  const name = path.basename(tokenizerDir);
  let failures = 0, portDiffers = 0, checked = 0;
  const fail = (ids, what, zt, theirs) => {
    if (++failures <= 10) {
      console.log(`FAIL ${name} decode ${JSON.stringify(ids)}: ${what}: ` +
        `zt ${JSON.stringify(zt)}, Hugging Face ${JSON.stringify(theirs)}`);
    }
  };
  const lines = fs.readFileSync(ztPath, "utf8").split("\n").filter((line) => line.length > 0);
  for (const line of lines) {
    const zt = JSON.parse(line);
    const ids = zt.ids;
    for (const skip of [false, true]) {
      const suffix = skip ? "_skip_special" : "";
      const rustText = await rust.decode(ids, skip);
      const key = "decode" + suffix, displayKey = "display" + suffix;
      if (zt[key] !== rustText) fail(ids, key, zt[key], rustText);
      const portText =
        port.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
      if (portText !== rustText) {
        if (!knownDifference(ids, rustText)) {
          fail(ids, "the JavaScript port differs from the Rust library", portText, rustText);
        }
        ++portDiffers;
        continue;
      }
      const display = port.decode(ids, { skip_special_tokens: skip });
      if (zt[displayKey] !== display) fail(ids, displayKey, zt[displayKey], display);
    }
    ++checked;
  }
  console.log(`${name}: ${checked} id lists decoded as the Rust tokenizers decodes them, special ` +
    `tokens kept and skipped, and displayed as the JavaScript port displays them` +
    (portDiffers > 0 ? ` (${portDiffers} decodings where the port's ByteFallback differs from ` +
      `Rust's, display not compared)` : "") + `; ${failures} failures`);
  return failures === 0 && checked > 0;
}

function refuses(tokenizerJson) {
  try {
    RustTokenizer.fromFile(tokenizerJson);
  } catch (error) {
    console.log(`Hugging Face's tokenizers refuses ${path.basename(tokenizerJson)}: ${error}`);
    return true;
  }
  console.log(`Hugging Face's tokenizers loads ${tokenizerJson}`);
  return false;
}

if (mode === "cases") {
  await printCases(args[0], args[1]);
} else if (mode === "compare") {
  process.exit((await compare(args[0], args[1], args[2])) ? 0 : 1);
} else if (mode === "refuses") {
  process.exit(refuses(args[0]) ? 0 : 1);
} else {
  console.error(`hf_decode.mjs: unknown mode '${mode}'; cases, compare or refuses`);
  process.exit(2);
}
