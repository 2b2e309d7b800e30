// Regex: compiling and matching with PCRE2. No state beyond the compiled pattern and its match
// data.
#include "runtime/data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/data/json_reader.h"
#include "runtime/status.h"

namespace zt {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// The byte after the UTF-8 character starting at `pos` (a stray byte counts as one character).
size_t next_char(std::string_view text, size_t pos) {
  ++pos;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  bool jit = false;

  ~Impl() {
    if (match_data) pcre2_match_data_free(match_data);
    if (code) pcre2_code_free(code);
    if (match_context) pcre2_match_context_free(match_context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& source,
             const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is never matched instead of failing the whole call, and
  // no per-call validity scan of the subject (which would make matching quadratic). UCP gives
  // \s, \w and \d their Unicode meaning; PCRE2 refuses it beside LITERAL, where it means
  // nothing.
  const uint32_t options =
      PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error, &error_offset, nullptr);
  if (impl_->code == nullptr) {
    throw_input(fmt::format("{}: {}: PCRE2 rejects the pattern at offset {}: {}", source, where,
                            error_offset, pcre2_message(error)));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;  // else interpret
  impl_->match_data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  impl_->match_context = pcre2_match_context_create(nullptr);
  if (impl_->match_data == nullptr || impl_->match_context == nullptr) {
    throw_system("PCRE2: out of memory");
  }
  if (impl_->jit) {
    // Long whitespace runs backtrack through `\s+(?!\S)`; give the JIT more than its 32 KiB.
    impl_->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (impl_->jit_stack == nullptr) throw_system("PCRE2: out of memory for the JIT stack");
    pcre2_jit_stack_assign(impl_->match_context, nullptr, impl_->jit_stack);
  }
}

Regex::~Regex() = default;

bool Regex::find(std::string_view text, size_t from, size_t& begin, size_t& end) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(impl_->match_data);
  while (from < text.size()) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), from, 0,
                                                impl_->match_data, impl_->match_context)
                              : pcre2_match(impl_->code, subject, text.size(), from, 0,
                                            impl_->match_data, impl_->match_context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      throw_system(fmt::format("PCRE2 match failed at byte {} of {}: {}", from, text.size(),
                               pcre2_message(rc)));
    }
    begin = ovector[0];
    end = ovector[1];
    if (end > begin) return true;
    from = next_char(text, begin);  // an empty match splits nothing
  }
  return false;
}

Pattern Pattern::read(const JsonFile& file, const nlohmann::json& pattern,
                      const std::string& where) {
  file.object(pattern, where);
  if (const nlohmann::json* regex = file.find(pattern, where, "Regex")) {
    const std::string regex_where = member_path(where, "Regex");
    return Pattern(std::make_unique<Regex>(file.string(*regex, regex_where), /*literal=*/false,
                                           file.path(), regex_where));
  }
  if (const nlohmann::json* literal = file.find(pattern, where, "String")) {
    Pattern out(file.string(*literal, member_path(where, "String")));
    if (out.literal_.empty()) file.fail(member_path(where, "String"), "is empty");
    return out;
  }
  file.fail(where, fmt::format("must hold \"Regex\" or \"String\"; got {}", shown(pattern)));
}

bool Pattern::find(std::string_view text, size_t from, size_t& begin, size_t& end) const {
  if (regex_) return regex_->find(text, from, begin, end);
  if (literal_.empty() || from >= text.size()) return false;
  begin = text.find(literal_, from);
  if (begin == std::string_view::npos) return false;
  end = begin + literal_.size();
  return true;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());
  size_t done = 0, begin = 0, end = 0;
  while (done < text.size() && find(text, done, begin, end)) {
    out.append(text.substr(done, begin - done));
    out.append(content);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace zt
