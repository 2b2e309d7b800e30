// zt-prep: tokenises text files into llm.c token files for zt-train, with GPT-2's BPE (--vocab:
// encoder.json + vocab.bpe) or a Hugging Face tokenizer.json (--tokenizer: byte-level BPE).
// Each input file is one document, preceded by the separator token (<|endoftext|> unless
// --separator names another, as llm.c's data scripts do). The token file holds uint16 ids as
// llm.c's does, or uint32 ids (version 2, runtime/data/token_data.h) once one passes 65535.
// With --val-out and --val-fraction, the last documents (in command-line order, never split)
// go to the validation file. Parses the command line and maps errors to exit codes; the
// tokenizer and the file format live in runtime/.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

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
  std::string out;
  std::string val_out;        // empty: everything goes to `out`
  double val_fraction = 0.0;  // share of documents for `val_out`
  std::vector<std::string> inputs;
};

std::string read_document(const std::string& path) { return zt::read_file(path, "input"); }

// Tokenises documents [begin, end) into one file and prints its summary line.
void write_split(zt::BpeTokenizer& tokenizer, int32_t separator,
                 const std::vector<std::string>& inputs, size_t begin, size_t end,
                 const std::string& out) {
  std::vector<int32_t> tokens;
  for (size_t i = begin; i < end; ++i) {
    tokens.push_back(separator);
    tokenizer.encode_append(read_document(inputs[i]), tokens);
  }
  zt::write_token_file(out, tokens);
  fmt::print("{}: {} documents, {} tokens\n", out, end - begin, tokens.size());
}

void run_prep(const PrepOptions& options) {
  const size_t documents = options.inputs.size();
  size_t val_documents = 0;
  if (!options.val_out.empty()) {
    val_documents = static_cast<size_t>(std::llround(options.val_fraction * documents));
    val_documents = std::max<size_t>(val_documents, 1);
    if (val_documents >= documents) {
      zt::throw_input(fmt::format("--val-fraction {} of {} documents leaves none for --out; "
                                  "give more inputs or a smaller fraction",
                                  options.val_fraction, documents));
    }
  }
  zt::BpeTokenizer tokenizer = options.tokenizer_path.empty()
                                   ? zt::Gpt2Tokenizer(options.vocab_dir)
                                   : zt::load_tokenizer_json(options.tokenizer_path);
  const std::optional<int32_t> separator = tokenizer.token_id(options.separator);
  if (!separator) {
    zt::throw_input(fmt::format("{} has no token \"{}\" to separate documents; name one with "
                                "--separator", tokenizer.source(), options.separator));
  }
  write_split(tokenizer, *separator, options.inputs, 0, documents - val_documents, options.out);
  if (val_documents > 0) {
    write_split(tokenizer, *separator, options.inputs, documents - val_documents, documents,
                options.val_out);
  }
}

// Returns the options, or std::nullopt after printing --help.
std::optional<PrepOptions> parse_command_line(int argc, char** argv) {
  PrepOptions options;
  po::options_description visible(
      "Usage: zt-prep (--vocab DIR | --tokenizer PATH) --out FILE [--separator TOKEN]\n"
      "               [--val-out FILE --val-fraction F] INPUT...\n"
      "Tokenises each INPUT text file as one document (preceded by the separator token) into\n"
      "an llm.c token file. Options");
  visible.add_options()
      ("help,h", "print this help")
      ("vocab", po::value(&options.vocab_dir),
       "directory holding GPT-2's encoder.json and vocab.bpe")
      ("tokenizer", po::value(&options.tokenizer_path),
       "a Hugging Face tokenizer.json (byte-level BPE), or a directory holding one")
      ("separator", po::value(&options.separator),
       "the token put before each document (default <|endoftext|>), e.g. <|end_of_text|>")
      ("out", po::value(&options.out)->required(), "token file to write (training split)")
      ("val-out", po::value(&options.val_out), "token file for the validation split")
      ("val-fraction", po::value(&options.val_fraction),
       "share of the documents (the last ones, in order) that go to --val-out; 0 < F < 1");
  po::options_description hidden;
  hidden.add_options()("input", po::value(&options.inputs)->multitoken(), "input text files");
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
    if (auto options = parse_command_line(argc, argv)) run_prep(*options);
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
