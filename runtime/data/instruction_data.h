// Instruction data: JSONL examples (prompt/completion pairs or chat messages) rendered with a
// model's chat template or a fixed one, tokenised with a loss mask, and packed into blocks of
// seq_len tokens for a version 3 token file (token_data.h). zt-prep runs it on .jsonl inputs. It
// does not write files and does not split train from validation (zt-prep does);
// docs/data_format.md shows the whole path from a line of JSON to the loader's targets.
//
// Input: one JSON object per line; blank lines are skipped, keys other than these are ignored.
//   {"prompt": P, "completion": C}: the text P then C with nothing between them (the data
//     brings its own format); the loss counts on C.
//   {"messages": [{"role": R, "content": X, ...}, ...], "tools": [...],
//    "chat_template_kwargs": {...}}: at least one message, the last from the assistant.
//     With a chat template (chat_template.h) the messages go to it as they are (any role, any
//     keys: tool_calls, ...), with "tools" (optional) and the variables of
//     "chat_template_kwargs" (optional, e.g. {"enable_thinking": false}); the loss counts on
//     each assistant reply and the end-of-turn text the template writes after it
//     (chat_segments.h says how they are found, and what is refused). Without one, the roles
//     are system, user and assistant, the contents strings, rendered by the template
//       "### System\n" X "\n\n"   "### User\n" X "\n\n"   "### Assistant\n" X "\n\n"
//     per message in order, without the "\n\n" after the last; the loss counts on the
//     assistant contents only, never on the headers or on system and user text.
// Then every example not rendered by a chat template ends with the end token (zt-prep's
// --separator), counted in the loss so the model learns to stop; a chat template's own
// end-of-turn text ends the others. An example may start with a BOS token, not counted (one a
// chat template wrote is not doubled). The first token of an example never counts (nothing in
// its document precedes it to predict it from).
//
// Tokenisation: no post-processor tokens are added (AddSpecialTokens::kNo). Prompt/completion
// and "### Role" text: each run of text with the same loss is tokenised on its own, so the mask
// boundary is exact (no token spans prompt and completion); special tokens written in the text
// stay text (SpecialTokens::kAsText). Chat template text: special tokens are matched
// (SpecialTokens::kMatch), and the whole text is tokenised at once, as transformers'
// apply_chat_template(tokenize=True) does, when each loss boundary is a token boundary of that
// (the tokens of the text before it are a prefix of the whole's); else each run on its own, as
// above, and the example is counted (TokenizedExample::by_segments).
//
// Packing (pack_examples): examples in input order fill blocks of exactly seq_len tokens; one
// that does not fit the rest of a block starts the next block, and the rest is padding: the pad
// id with kTokenDocStart and never kTokenLoss, so each pad token is a document of its own. With
// Packing::kOnePerBlock every example starts a block (for attention without document masks).
// An example longer than seq_len is cut to seq_len. One pad token follows the last block: the
// target of the last block's last token.
//
// Errors (kInput, one line): "path:line: what is wrong" for a bad line, "path: ..." for a file
// with no examples. Pinned by tests/runtime/data/instruction_data_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/bpe_tokenizer.h"

namespace zt {

class ChatTemplate;

enum class Loss : bool { kNo, kYes };

// A run of an example's rendered text and whether the loss counts on its tokens.
struct TextSegment {
  std::string text;
  Loss loss = Loss::kNo;
  bool operator==(const TextSegment&) const = default;
};

// One JSONL line, rendered: segments in order, none empty, adjacent ones differing in loss.
struct InstructionExample {
  std::string where;  // "path:line", for reports
  std::vector<TextSegment> segments;
  bool messages = false;   // a {"messages"} line
  bool templated = false;  // rendered by a chat template (see the tokenisation above)
};

// Parses and renders one line found at `where` ("path:line"). A line that is not JSON, not an
// object, has neither "prompt"/"completion" nor "messages" (or both), a value of the wrong
// type, an unknown role (without a chat template), no assistant message last, or a refused
// chat template render (chat_segments.h) throws kInput "where: problem". `chat_template` null:
// messages are rendered with the "### Role" template.
InstructionExample parse_instruction_example(std::string_view line, const std::string& where,
                                             const ChatTemplate* chat_template = nullptr);

// Every example of a JSONL file, in order. An unreadable file, a bad line (as above, naming
// path:line) or a file without examples throws kInput.
std::vector<InstructionExample> read_instruction_file(const std::string& path,
                                                      const ChatTemplate* chat_template = nullptr);

// An example's ids and their flags (token_data.h: kTokenDocStart on the first, kTokenLoss on
// the completion tokens and the end token).
struct TokenizedExample {
  std::string where;
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  bool by_segments = false;  // chat template text tokenised run by run (see above)
};

// [bos_id] then the segments' tokens then end_id; for a templated example, [bos_id] unless
// its text starts with that token, then its tokens.
TokenizedExample tokenize_example(BpeTokenizer& tokenizer, const InstructionExample& example,
                                  int32_t end_id, std::optional<int32_t> bos_id);

enum class Packing { kGreedy, kOnePerBlock };

// What write_token_file(path, ids, flags, seq_len) takes, and what went into it.
struct PackedExamples {
  std::vector<int32_t> ids;    // (blocks*seq_len + 1,)
  std::vector<uint8_t> flags;  // (blocks*seq_len + 1,)
  int64_t examples = 0;
  int64_t blocks = 0;
  int64_t completion_tokens = 0;         // tokens with kTokenLoss
  int64_t padding_tokens = 0;            // pad tokens inside the blocks (not the trailing one)
  int64_t truncated = 0;                 // examples longer than seq_len, cut to it
  int64_t without_completion = 0;        // examples left with no kTokenLoss token
  std::string first_without_completion;  // the first one's where; empty when none
};

// Packs `examples` in order into blocks of seq_len (>= 1) tokens, padding with pad_id.
PackedExamples pack_examples(std::span<const TokenizedExample> examples, int64_t seq_len,
                             int32_t pad_id, Packing packing);

}  // namespace zt
