// A conversation rendered by a model's chat template (chat_template.h) and split into the runs
// of text the loss counts on and those it does not, for instruction data (instruction_data.h).
//
// The whole conversation is rendered once (add_generation_prompt false). For each assistant
// message k, two prefixes are rendered:
//   start_k = render(messages[0..k), add_generation_prompt=true): ends where reply k begins;
//   end_k   = render(messages[0..k], add_generation_prompt=false): ends where reply k ends,
//             its end-of-turn text included (<|eot_id|>, <|im_end|>\n, </s>, ...).
// The loss counts on [start_k, end_k) of the whole render, for every assistant message: the
// reply's content and what the template writes after it up to where the next message begins.
// Headers, system, user and tool text never count.
//
// The template's closing text: what it renders for no messages (render([]) with
// add_generation_prompt false, when that renders; Phi-3's eos_token, the unconditional
// assistant header of some Llama 3 templates) is cut from the end of end_k and of the whole
// render before they are compared, and is not counted.
//
// Refused (kInput, one line "where: ..."): a start_k or end_k that is not a prefix of the whole
// render, an end_k that does not start with start_k, a reply that starts before the previous
// one ended, each naming the prefix, the byte where the texts part and both texts there (Qwen3
// drops the thinking of earlier turns and Mistral moves the system message to the last user
// turn, so their multi-turn renders are refused); and the template's own errors
// (raise_exception), prefixed with where.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/data/chat_template.h"
#include "runtime/data/instruction_data.h"

namespace zt {

// The segments of `messages` (a JSON array, at least one message, the last from the
// assistant; checked by the caller) rendered with `chat_template`, `tools` (null or an array)
// and `extra` variables (null or an object). `where` ("path:line") prefixes every error.
std::vector<TextSegment> render_chat_segments(const ChatTemplate& chat_template,
                                              const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              const nlohmann::ordered_json& extra,
                                              const std::string& where);

}  // namespace zt
