// Chat template renders split at the assistant replies. See chat_segments.h.
#include "runtime/data/chat_segments.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Up to 32 bytes of `text` from `at`, as a JSON string (newlines escaped: errors are one line).
std::string excerpt(std::string_view text, size_t at) {
  constexpr size_t kBytes = 32;
  const std::string_view part = text.substr(std::min(at, text.size()), kBytes);
  std::string out =
      OrderedJson(std::string(part)).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  if (at + kBytes < text.size()) out += "...";
  return out;
}

// Refuses unless `whole` starts with `prefix`; `what` names the prefix, `whole_name` the other.
void expect_prefix(std::string_view prefix, std::string_view whole, const std::string& what,
                   std::string_view whole_name, const std::string& template_name,
                   const std::string& where) {
  if (whole.starts_with(prefix)) return;
  const auto parted = std::mismatch(prefix.begin(), prefix.end(), whole.begin(), whole.end());
  const auto at = static_cast<size_t>(parted.first - prefix.begin());
  throw_input(
      fmt::format("{}: the chat template {} renders {} as text that is not the start of {}, so the "
                  "assistant turns cannot be masked: at byte {} it has {} where {} has {}",
                  where, template_name, what, whole_name, at, excerpt(prefix, at), whole_name,
                  excerpt(whole, at)));
}

void append(std::vector<TextSegment>& segments, std::string_view text, Loss loss) {
  if (text.empty()) return;
  if (!segments.empty() && segments.back().loss == loss) {
    segments.back().text += text;
  } else {
    segments.push_back({std::string(text), loss});
  }
}

}  // namespace

std::vector<TextSegment> render_chat_segments(const ChatTemplate& chat_template,
                                              const OrderedJson& messages, const OrderedJson& tools,
                                              const OrderedJson& extra, const std::string& where) {
  // The first n messages, rendered; a template error names the example.
  auto render = [&](size_t n, bool add_generation_prompt) {
    OrderedJson prefix = OrderedJson::array();
    for (size_t i = 0; i < n; ++i) prefix.push_back(messages[i]);
    try {
      return chat_template.render(prefix, add_generation_prompt, tools, extra);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInput) throw;
      throw_input(fmt::format("{}: {}", where, e.message()));
    }
  };
  std::string closing;  // what the template writes after the last message, whatever they are
  try {
    closing = chat_template.render(OrderedJson::array(), false, tools, extra);
  } catch (const Error&) {
    // Most templates index messages[0]: they have no closing text to cut.
  }
  auto without_closing = [&](std::string text) {
    if (!closing.empty() && text.ends_with(closing)) text.resize(text.size() - closing.size());
    return text;
  };
  const std::string whole = render(messages.size(), false);
  const std::string body = without_closing(whole);
  const std::string& name = chat_template.name();
  std::vector<TextSegment> segments;
  size_t done = 0;  // bytes of `whole` already in segments
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].value("role", "") != "assistant") continue;
    const std::string start = render(k, true);
    const std::string end = without_closing(render(k + 1, false));
    const std::string start_name =
        fmt::format("messages[0..{}) with the generation prompt (where reply {} begins)", k, k);
    const std::string end_name = fmt::format("messages[0..{}] (where reply {} ends)", k, k);
    expect_prefix(start, body, start_name, "the whole conversation", name, where);
    expect_prefix(start, end, start_name, end_name, name, where);
    expect_prefix(end, body, end_name, "the whole conversation", name, where);
    if (start.size() < done) {
      throw_input(fmt::format(
          "{}: the chat template {} renders reply {} as beginning at byte {}, before the "
          "previous reply ends (byte {}); the assistant turns cannot be masked",
          where, name, k, start.size(), done));
    }
    append(segments, std::string_view(whole).substr(done, start.size() - done), Loss::kNo);
    append(segments, std::string_view(whole).substr(start.size(), end.size() - start.size()),
           Loss::kYes);
    done = end.size();
  }
  append(segments, std::string_view(whole).substr(done), Loss::kNo);
  return segments;
}

}  // namespace zt
