// zt-prep: tokenises text files or instruction data into token files for zt-train, with GPT-2's
// BPE (--vocab: encoder.json + vocab.bpe) or a Hugging Face tokenizer.json (--tokenizer: a BPE
// model, runtime/data/tokenizer_json.h).
//   Text: each input file is one document, with the special tokens the tokenizer's own
//     post-processor puts around a text (Llama 2's <s> before it; none for GPT-2), preceded by
//     the separator token when the tokenizer adds none or --separator is given (<|endoftext|>
//     unless --separator names another, as llm.c's data scripts do). The token file holds
//     uint16 ids as llm.c's does, or uint32 ids (version 2, runtime/data/token_data.h) once one
//     passes 65535.
//   Instruction data (inputs ending in .jsonl, never mixed with text in one call): one example
//     per line, prompt/completion or chat messages, each ending with the separator, optionally
//     after a --bos token, packed into blocks of --seq-len tokens (one example per block with
//     --pad) in a version 3 token file whose flags mark the completion tokens the loss counts
//     on (runtime/data/instruction_data.h, docs/data_format.md).
// With --val-out and --val-fraction, the last documents or examples (in command-line order,
// never split) go to the validation file. Parses the command line and maps errors to exit
// codes; the tokenizer, the template, the packing and the file format live in runtime/.
// --print-ids prints each input's ids as Hugging Face's encode() gives them (special tokens
// matched in the text and added around it) and their decoding, one JSON line per input, and
// writes no file (tests/e2e/hf_tokenizers.sh compares them with Hugging Face's).
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/instruction_data.h"
#include "runtime/data/token_data.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/tokenizer_json.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace {

namespace po = boost::program_options;

struct PrepOptions {
  std::string vocab_dir;       // GPT-2's encoder.json + vocab.bpe; or
  std::string tokenizer_path;  // a tokenizer.json, or a directory holding one
  std::string separator = "<|endoftext|>";
  bool separator_given = false;  // --separator on the command line
  bool print_ids = false;        // --print-ids: JSON lines to stdout, no token file
  std::string out;
  std::string val_out;        // empty: everything goes to `out`
  double val_fraction = 0.0;  // share of documents (or examples) for `val_out`
  int64_t seq_len = 0;        // .jsonl: the block length examples are packed into
  std::string bos;            // .jsonl: a token put first in every example; empty: none
  bool pad = false;           // .jsonl: one example per block
  std::vector<std::string> inputs;
};

bool is_jsonl(const std::string& path) { return path.ends_with(".jsonl"); }

std::string read_document(const std::string& path) { return zt::read_file(path, "input"); }

// How many of `count` documents or examples (`what`) go to --val-out: the last ones, at least
// one, and never all.
size_t validation_count(const PrepOptions& options, size_t count, std::string_view what) {
  if (options.val_out.empty()) return 0;
  size_t val_count = static_cast<size_t>(std::llround(options.val_fraction * count));
  val_count = std::max<size_t>(val_count, 1);
  if (val_count >= count) {
    zt::throw_input(
        fmt::format("--val-fraction {} of {} {} leaves none for --out; give more "
                    "inputs or a smaller fraction",
                    options.val_fraction, count, what));
  }
  return val_count;
}

zt::BpeTokenizer load_tokenizer(const PrepOptions& options) {
  return options.tokenizer_path.empty() ? zt::Gpt2Tokenizer(options.vocab_dir)
                                        : zt::load_tokenizer_json(options.tokenizer_path);
}

// The id of the token `content` that `option` names; `role` says what it is for in the error.
int32_t token_for(const zt::BpeTokenizer& tokenizer, const std::string& content,
                  std::string_view option, std::string_view role) {
  const std::optional<int32_t> id = tokenizer.token_id(content);
  if (!id) {
    zt::throw_input(fmt::format("{} has no token \"{}\" to {}; name one with {}",
                                tokenizer.source(), content, role, option));
  }
  return *id;
}

// Tokenises documents [begin, end) into one file and prints its summary line. Each document
// gets the tokenizer's own special tokens, after the separator if there is one.
void write_split(zt::BpeTokenizer& tokenizer, std::optional<int32_t> separator,
                 const std::vector<std::string>& inputs, size_t begin, size_t end,
                 const std::string& out) {
  std::vector<int32_t> tokens;
  for (size_t i = begin; i < end; ++i) {
    if (separator) tokens.push_back(*separator);
    tokenizer.encode_append(read_document(inputs[i]), tokens, zt::SpecialTokens::kAsText,
                            zt::AddSpecialTokens::kYes);
  }
  zt::write_token_file(out, tokens);
  fmt::print("{}: {} documents, {} tokens\n", out, end - begin, tokens.size());
}

void prep_text(const PrepOptions& options) {
  const size_t documents = options.inputs.size();
  const size_t val_documents = validation_count(options, documents, "documents");
  zt::BpeTokenizer tokenizer = load_tokenizer(options);
  const bool tokenizer_adds = !tokenizer.prefix_ids().empty() || !tokenizer.suffix_ids().empty();
  std::optional<int32_t> separator;
  if (!tokenizer_adds || options.separator_given) {
    separator = token_for(tokenizer, options.separator, "--separator", "separate documents");
  }
  write_split(tokenizer, separator, options.inputs, 0, documents - val_documents, options.out);
  if (val_documents > 0) {
    write_split(tokenizer, separator, options.inputs, documents - val_documents, documents,
                options.val_out);
  }
}

// --print-ids: {"file": F, "ids": [...], "text": decode(ids)} for each input.
void print_ids(const PrepOptions& options) {
  zt::BpeTokenizer tokenizer = load_tokenizer(options);
  for (const std::string& input : options.inputs) {
    const std::vector<int32_t> ids = tokenizer.encode(
        read_document(input), zt::SpecialTokens::kMatch, zt::AddSpecialTokens::kYes);
    const nlohmann::json line = {{"file", input}, {"ids", ids}, {"text", tokenizer.decode(ids)}};
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
}

// Tokenises and packs `examples` into one file and prints its summary line.
void write_instruction_split(zt::BpeTokenizer& tokenizer, const PrepOptions& options,
                             int32_t end_id, std::optional<int32_t> bos_id,
                             std::span<const zt::InstructionExample> examples,
                             const std::string& out) {
  std::vector<zt::TokenizedExample> tokenized;
  tokenized.reserve(examples.size());
  for (const zt::InstructionExample& example : examples) {
    tokenized.push_back(zt::tokenize_example(tokenizer, example, end_id, bos_id));
  }
  const zt::PackedExamples packed =
      zt::pack_examples(tokenized, options.seq_len, end_id,
                        options.pad ? zt::Packing::kOnePerBlock : zt::Packing::kGreedy);
  zt::write_token_file(out, packed.ids, packed.flags, options.seq_len);
  const auto block_tokens = static_cast<double>(packed.blocks * options.seq_len);
  std::string without_completion;
  if (packed.without_completion > 0) {
    without_completion = fmt::format(", {} examples without completion tokens (the first at {})",
                                     packed.without_completion, packed.first_without_completion);
  }
  fmt::print(
      "{}: {} examples, {} blocks of {} tokens, {} completion tokens ({:.1f}%), {} "
      "padding tokens, {} truncated examples{}\n",
      out, packed.examples, packed.blocks, options.seq_len, packed.completion_tokens,
      100.0 * static_cast<double>(packed.completion_tokens) / block_tokens, packed.padding_tokens,
      packed.truncated, without_completion);
}

void prep_instruction_data(const PrepOptions& options) {
  std::vector<zt::InstructionExample> examples;
  for (const std::string& input : options.inputs) {
    std::vector<zt::InstructionExample> file_examples = zt::read_instruction_file(input);
    std::move(file_examples.begin(), file_examples.end(), std::back_inserter(examples));
  }
  const size_t val_examples = validation_count(options, examples.size(), "examples");
  zt::BpeTokenizer tokenizer = load_tokenizer(options);
  const int32_t end_id = token_for(tokenizer, options.separator, "--separator", "end examples");
  std::optional<int32_t> bos_id;
  if (!options.bos.empty()) bos_id = token_for(tokenizer, options.bos, "--bos", "begin examples");
  const std::span<const zt::InstructionExample> all(examples);
  const size_t train_examples = examples.size() - val_examples;
  write_instruction_split(tokenizer, options, end_id, bos_id, all.first(train_examples),
                          options.out);
  if (val_examples > 0) {
    write_instruction_split(tokenizer, options, end_id, bos_id, all.subspan(train_examples),
                            options.val_out);
  }
}

// Returns the options, or std::nullopt after printing --help.
std::optional<PrepOptions> parse_command_line(int argc, char** argv) {
  PrepOptions options;
  po::options_description visible(
      "Usage: zt-prep (--vocab DIR | --tokenizer PATH) --out FILE [--separator TOKEN]\n"
      "               [--val-out FILE --val-fraction F] INPUT...\n"
      "       zt-prep (--vocab DIR | --tokenizer PATH) --print-ids INPUT...\n"
      "       zt-prep (--vocab DIR | --tokenizer PATH) --out FILE --seq-len N [--pad]\n"
      "               [--separator TOKEN] [--bos TOKEN] [--val-out FILE --val-fraction F]\n"
      "               DATA.jsonl...\n"
      "Tokenises each INPUT text file as one document (with the tokenizer's own BOS/EOS, after\n"
      "the separator token unless the tokenizer adds some) into an llm.c token file. Inputs ending "
      "in .jsonl are instruction data instead: one example\n"
      "per line, {\"prompt\": P, \"completion\": C} or "
      "{\"messages\": [{\"role\": R, \"content\": X},\n"
      "...]} with R system, user or assistant; each ends with the separator token and is packed\n"
      "into blocks of N tokens, the loss on C or on the assistant's X only (template and file\n"
      "format: docs/data_format.md). Options");
  visible.add_options()("help,h", "print this help")(
      "vocab", po::value(&options.vocab_dir),
      "directory holding GPT-2's encoder.json and vocab.bpe")(
      "tokenizer", po::value(&options.tokenizer_path),
      "a Hugging Face tokenizer.json (byte-level BPE), or a directory holding one")(
      "separator", po::value(&options.separator),
      "the token put before each document (by default only when the tokenizer adds no "
      "BOS/EOS of its own), or after each .jsonl example and as its padding (default "
      "<|endoftext|>), e.g. <|end_of_text|>")("print-ids", po::bool_switch(&options.print_ids),
                                              "print each INPUT's ids (as Hugging Face's "
                                              "encode gives them) and their decoding as JSON "
                                              "lines; write no file")(
      "out", po::value(&options.out), "token file to write (training split)")(
      "val-out", po::value(&options.val_out), "token file for the validation split")(
      "val-fraction", po::value(&options.val_fraction),
      "share of the documents or examples (the last ones, in order) that go to --val-out; "
      "0 < F < 1")(
      "seq-len", po::value(&options.seq_len),
      ".jsonl: the block length N examples are packed into (train with seq_len a multiple of "
      "N); longer examples are cut to N")(
      "bos", po::value(&options.bos),
      ".jsonl: a token put first in every example (not trained on), e.g. <|begin_of_text|>")(
      "pad", po::bool_switch(&options.pad),
      ".jsonl: one example per block, the rest padding (for attention without document "
      "masks)");
  po::options_description hidden;
  hidden.add_options()("input", po::value(&options.inputs)->multitoken(),
                       "input text or .jsonl files");
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("input", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << visible << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-prep --help)", e.what()));
  }
  if (options.inputs.empty()) zt::throw_input("no INPUT files given (see zt-prep --help)");
  options.separator_given = vm.count("separator") > 0;
  if (options.print_ids != options.out.empty()) {
    zt::throw_input(options.print_ids ? "--print-ids writes no file; drop --out"
                                      : "the option '--out' is required but missing (see zt-prep "
                                        "--help)");
  }
  const auto jsonl = std::find_if(options.inputs.begin(), options.inputs.end(), is_jsonl);
  const auto text = std::find_if_not(options.inputs.begin(), options.inputs.end(), is_jsonl);
  if (jsonl != options.inputs.end() && text != options.inputs.end()) {
    zt::throw_input(
        fmt::format("the INPUTs mix instruction data ({}) and text ({}); prepare "
                    "them in separate calls",
                    *jsonl, *text));
  }
  if (jsonl != options.inputs.end()) {
    if (!vm.count("seq-len")) {
      zt::throw_input(
          "instruction data (.jsonl) needs --seq-len N, the block length examples "
          "are packed into (see zt-prep --help)");
    }
    if (options.seq_len < 1 || options.seq_len > INT32_MAX) {
      zt::throw_input(fmt::format("--seq-len must be 1..{}; got {}", INT32_MAX, options.seq_len));
    }
  } else if (vm.count("seq-len") || vm.count("bos") || options.pad) {
    zt::throw_input("--seq-len, --bos and --pad apply to instruction data (.jsonl inputs) only");
  }
  if (vm.count("vocab") + vm.count("tokenizer") != 1) {
    zt::throw_input("give exactly one of --vocab and --tokenizer (see zt-prep --help)");
  }
  if (vm.count("val-out") != vm.count("val-fraction")) {
    zt::throw_input("--val-out and --val-fraction must be given together");
  }
  if (vm.count("val-fraction") && !(options.val_fraction > 0.0 && options.val_fraction < 1.0)) {
    zt::throw_input(fmt::format("--val-fraction must be between 0 and 1 (exclusive); got {}",
                                options.val_fraction));
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (auto options = parse_command_line(argc, argv)) {
      if (options->print_ids)
        print_ids(*options);
      else if (is_jsonl(options->inputs.front()))
        prep_instruction_data(*options);
      else
        prep_text(*options);
    }
    return 0;
  } catch (const zt::Error& e) {
    const bool input = e.kind() == zt::ErrorKind::kInput;
    std::cerr << "zt-prep: " << (input ? e.message() : e.describe()) << "\n";
    return input ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "zt-prep: " << e.what() << "\n";
    return 1;
  }
}
