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
//     on (runtime/data/instruction_data.h, docs/data_format.md). Chat messages are rendered
//     with the tokenizer directory's chat template when it has one (--template: auto, builtin
//     for the "### Role" template, or a .jinja file), the loss on the assistant turns.
// With --val-out and --val-fraction, the last documents or examples (in command-line order,
// never split) go to the validation file. Parses the command line and maps errors to exit
// codes; the tokenizer, the template, the packing and the file format live in runtime/.
// --print-ids prints each input's ids as Hugging Face's encode() gives them (special tokens
// matched in the text and added around it) and their decoding, one JSON line per input, and
// writes no file (tests/e2e/hf_tokenizers.sh compares them with Hugging Face's). --decode-ids
// reads JSON arrays of ids, one per line, and prints their four decodings (special tokens kept
// or skipped, with or without the display clean-up) the same way.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/chat_template.h"
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
  bool decode_ids = false;       // --decode-ids: the same, for id lists read from the inputs
  std::string out;
  std::string val_out;                 // empty: everything goes to `out`
  double val_fraction = 0.0;           // share of documents (or examples) for `val_out`
  int64_t seq_len = 0;                 // .jsonl: the block length examples are packed into
  std::string bos;                     // .jsonl: a token put first in every example; empty: none
  bool pad = false;                    // .jsonl: one example per block
  std::string chat_template = "auto";  // .jsonl: auto, builtin, or a .jinja file
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

// One --decode-ids line: a JSON array of token ids. `where` is "FILE:LINE" for errors.
std::vector<int32_t> read_id_list(const std::string& line, const std::string& where) {
  const nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const bool ids = value.is_array() && std::all_of(value.begin(), value.end(), [](const auto& id) {
                     return id.is_number_integer() && id.template get<int64_t>() >= INT32_MIN &&
                            id.template get<int64_t>() <= INT32_MAX;
                   });
  if (!ids) {
    zt::throw_input(fmt::format("{}: expected a JSON array of token ids, e.g. [1, 15043]", where));
  }
  return value.get<std::vector<int32_t>>();
}

// --decode-ids: for each line of each input, {"ids", "decode", "decode_skip_special",
// "display", "display_skip_special"}: decode() and decode_for_display(), special tokens kept
// and skipped.
void decode_ids(const PrepOptions& options) {
  const zt::BpeTokenizer tokenizer = load_tokenizer(options);
  constexpr auto kSkip = zt::SkipSpecialTokens::kYes;
  for (const std::string& input : options.inputs) {
    const std::string text = read_document(input);
    size_t line_number = 0;
    for (size_t begin = 0; begin < text.size();) {
      const size_t end = std::min(text.find('\n', begin), text.size());
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", input, line_number);
      const std::vector<int32_t> ids = read_id_list(line, where);
      try {
        const nlohmann::json out = {
            {"ids", ids},
            {"decode", tokenizer.decode(ids)},
            {"decode_skip_special", tokenizer.decode(ids, kSkip)},
            {"display", tokenizer.decode_for_display(ids)},
            {"display_skip_special", tokenizer.decode_for_display(ids, kSkip)}};
        std::cout << out.dump() << "\n";
      } catch (const zt::Error& e) {
        zt::throw_input(fmt::format("{}: {}", where, e.message()));
      }
    }
  }
}

// The chat template {"messages"} lines are rendered with (none: the "### Role" template), and
// how the summary line names it.
struct ChatTemplateChoice {
  std::optional<zt::ChatTemplate> chat_template;
  std::string description;
};

ChatTemplateChoice choose_chat_template(const PrepOptions& options) {
  namespace fs = std::filesystem;
  std::string dir = options.tokenizer_path.empty() ? options.vocab_dir : options.tokenizer_path;
  if (!fs::is_directory(dir)) dir = fs::path(dir).parent_path().string();
  if (dir.empty()) dir = ".";
  ChatTemplateChoice choice;
  if (options.chat_template == "builtin") {
    choice.description = "### Role (--template builtin)";
  } else if (options.chat_template != "auto") {
    choice.chat_template = zt::ChatTemplate::load_file(options.chat_template, dir);
  } else if (zt::ChatTemplate::found_in(dir)) {
    choice.chat_template = zt::ChatTemplate::load(dir);
  } else {
    choice.description = fmt::format("### Role (no chat_template in {})", dir);
  }
  if (choice.chat_template) choice.description = choice.chat_template->name();
  return choice;
}

// The end (and pad) token's text: --separator, else a chat template's eos_token when the
// tokenizer has it, else <|endoftext|>.
std::string end_token(const PrepOptions& options, const zt::BpeTokenizer& tokenizer,
                      const ChatTemplateChoice& choice) {
  if (options.separator_given || !choice.chat_template) return options.separator;
  const auto& tokens = choice.chat_template->special_tokens();
  if (tokens.contains("eos_token") && tokens["eos_token"].is_string()) {
    const std::string eos = tokens["eos_token"].get<std::string>();
    if (tokenizer.token_id(eos)) return eos;
  }
  return options.separator;
}

// Tokenises and packs `examples` into one file and prints its summary line.
void write_instruction_split(zt::BpeTokenizer& tokenizer, const PrepOptions& options,
                             int32_t end_id, std::optional<int32_t> bos_id,
                             std::span<const zt::InstructionExample> examples,
                             const std::string& out, const std::string& template_description) {
  std::vector<zt::TokenizedExample> tokenized;
  tokenized.reserve(examples.size());
  bool any_messages = false;
  int64_t by_segments = 0;
  std::string first_by_segments;
  for (const zt::InstructionExample& example : examples) {
    tokenized.push_back(zt::tokenize_example(tokenizer, example, end_id, bos_id));
    any_messages = any_messages || example.messages;
    if (tokenized.back().by_segments && by_segments++ == 0) first_by_segments = example.where;
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
  if (by_segments > 0) {
    without_completion += fmt::format(
        ", {} chat examples tokenised run by run, a token crossing a loss boundary (the "
        "first at {})",
        by_segments, first_by_segments);
  }
  if (any_messages) without_completion += "; messages rendered by " + template_description;
  fmt::print(
      "{}: {} examples, {} blocks of {} tokens, {} completion tokens ({:.1f}%), {} "
      "padding tokens, {} truncated examples{}\n",
      out, packed.examples, packed.blocks, options.seq_len, packed.completion_tokens,
      100.0 * static_cast<double>(packed.completion_tokens) / block_tokens, packed.padding_tokens,
      packed.truncated, without_completion);
}

void prep_instruction_data(const PrepOptions& options) {
  const ChatTemplateChoice choice = choose_chat_template(options);
  const zt::ChatTemplate* chat_template = choice.chat_template ? &*choice.chat_template : nullptr;
  std::vector<zt::InstructionExample> examples;
  for (const std::string& input : options.inputs) {
    std::vector<zt::InstructionExample> file_examples =
        zt::read_instruction_file(input, chat_template);
    std::move(file_examples.begin(), file_examples.end(), std::back_inserter(examples));
  }
  const size_t val_examples = validation_count(options, examples.size(), "examples");
  zt::BpeTokenizer tokenizer = load_tokenizer(options);
  const int32_t end_id =
      token_for(tokenizer, end_token(options, tokenizer, choice), "--separator", "end examples");
  std::optional<int32_t> bos_id;
  if (!options.bos.empty()) bos_id = token_for(tokenizer, options.bos, "--bos", "begin examples");
  const std::span<const zt::InstructionExample> all(examples);
  const size_t train_examples = examples.size() - val_examples;
  write_instruction_split(tokenizer, options, end_id, bos_id, all.first(train_examples),
                          options.out, choice.description);
  if (val_examples > 0) {
    write_instruction_split(tokenizer, options, end_id, bos_id, all.subspan(train_examples),
                            options.val_out, choice.description);
  }
}

// Returns the options, or std::nullopt after printing --help.
std::optional<PrepOptions> parse_command_line(int argc, char** argv) {
  PrepOptions options;
  po::options_description visible(
      "Usage: zt-prep (--vocab DIR | --tokenizer PATH) --out FILE [--separator TOKEN]\n"
      "               [--val-out FILE --val-fraction F] INPUT...\n"
      "       zt-prep (--vocab DIR | --tokenizer PATH) --print-ids INPUT...\n"
      "       zt-prep (--vocab DIR | --tokenizer PATH) --decode-ids IDS_FILE...\n"
      "       zt-prep (--vocab DIR | --tokenizer PATH) --out FILE --seq-len N [--pad]\n"
      "               [--separator TOKEN] [--bos TOKEN] [--template auto|builtin|FILE]\n"
      "               [--val-out FILE --val-fraction F] DATA.jsonl...\n"
      "Tokenises each INPUT text file as one document (with the tokenizer's own BOS/EOS, after\n"
      "the separator token unless the tokenizer adds some) into an llm.c token file. Inputs ending "
      "in .jsonl are instruction data instead: one example\n"
      "per line, {\"prompt\": P, \"completion\": C} or "
      "{\"messages\": [{\"role\": R, \"content\": X},\n"
      "...]}, rendered by the tokenizer's chat template when it has one (else a \"### Role\"\n"
      "template, R system, user or assistant); each is packed into blocks of N tokens, the loss\n"
      "on C, or on the assistant turns only (templates and file format: docs/data_format.md).\n"
      "Options");
  visible.add_options()("help,h", "print this help")(
      "vocab", po::value(&options.vocab_dir),
      "directory holding GPT-2's encoder.json and vocab.bpe")(
      "tokenizer", po::value(&options.tokenizer_path),
      "a Hugging Face tokenizer.json (byte-level BPE), or a directory holding one")(
      "separator", po::value(&options.separator),
      "the token put before each document (by default only when the tokenizer adds no "
      "BOS/EOS of its own), or after each .jsonl example not rendered by a chat template and as "
      "the padding (default <|endoftext|>; with a chat template, its eos_token), e.g. "
      "<|end_of_text|>")("print-ids", po::bool_switch(&options.print_ids),
                         "print each INPUT's ids (as Hugging Face's "
                         "encode gives them) and their decoding as JSON "
                         "lines; write no file")(
      "decode-ids", po::bool_switch(&options.decode_ids),
      "read each INPUT as JSON arrays of token ids, one per line, and print their decodings "
      "(special tokens kept and skipped, with and without the tokenizer_config.json clean-up) "
      "as JSON lines; write no file")("out", po::value(&options.out),
                                      "token file to write (training split)")(
      "val-out", po::value(&options.val_out), "token file for the validation split")(
      "val-fraction", po::value(&options.val_fraction),
      "share of the documents or examples (the last ones, in order) that go to --val-out; "
      "0 < F < 1")(
      "seq-len", po::value(&options.seq_len),
      ".jsonl: the block length N examples are packed into (train with seq_len a multiple of "
      "N); longer examples are cut to N")(
      "bos", po::value(&options.bos),
      ".jsonl: a token put first in every example (not trained on; not again after the one a "
      "chat template writes), e.g. <|begin_of_text|>")(
      "template", po::value(&options.chat_template),
      ".jsonl: how {\"messages\"} lines are rendered: auto (default: the chat template of the "
      "tokenizer's directory, chat_template.jinja or tokenizer_config.json's chat_template, "
      "else ### Role headers), builtin (### Role headers), or a .jinja file")(
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
  if (options.print_ids && options.decode_ids) {
    zt::throw_input("--print-ids and --decode-ids are two modes; give one");
  }
  const bool prints = options.print_ids || options.decode_ids;
  if (prints != options.out.empty()) {
    zt::throw_input(prints ? fmt::format("{} writes no file; drop --out",
                                         options.print_ids ? "--print-ids" : "--decode-ids")
                           : "the option '--out' is required but missing (see zt-prep --help)");
  }
  if (vm.count("vocab") + vm.count("tokenizer") != 1) {
    zt::throw_input("give exactly one of --vocab and --tokenizer (see zt-prep --help)");
  }
  if (options.decode_ids) return options;  // its inputs hold ids, whatever their names
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
  } else if (vm.count("seq-len") || vm.count("bos") || options.pad || vm.count("template")) {
    zt::throw_input(
        "--seq-len, --bos, --pad and --template apply to instruction data (.jsonl inputs) "
        "only");
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
      else if (options->decode_ids)
        decode_ids(*options);
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
