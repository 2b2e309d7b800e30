// PreTokenizer: reading a tokenizer.json pre-tokenizer into a flat list of steps, and cutting
// text into words with it. Each step maps the spans of one buffer to finer spans; Metaspace and
// ByteLevel's prefix space rewrite the buffer.
#include "runtime/data/pre_tokenizer.h"

#include "runtime/data/regex.h"
#include "runtime/data/unicode_text.h"
#include "runtime/status.h"

namespace zt {

using json = nlohmann::json;

namespace {

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
// What a Split-like step matches: a pattern, or single characters of one class.
enum class Matcher { kPattern, kNumeric, kPunctuation, kWhitespace };

// A stretch of a piece, a match of the step's pattern or not.
struct Stretch {
  size_t begin, end;
  bool match;
};

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kMetaspace, kPrefixSpace };
  Kind kind = Kind::kSplit;
  // kSplit
  Matcher matcher = Matcher::kPattern;
  Pattern pattern;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // kMetaspace
  std::string replacement;
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

namespace {

using Step = PreTokenizer::Step;
using Span = Words::Span;

// Every match of `step` in `piece`, and the text between, in order and covering it.
void find_stretches(const Step& step, std::string_view piece, std::vector<Stretch>& out) {
  out.clear();
  size_t done = 0;
  auto add_match = [&](size_t begin, size_t end) {
    if (begin > done) out.push_back({done, begin, false});
    out.push_back({begin, end, true});
    done = end;
  };
  if (step.matcher == Matcher::kPattern) {
    size_t begin = 0, end = 0;
    while (done < piece.size() && step.pattern.find(piece, done, begin, end)) add_match(begin, end);
  } else {
    int32_t cp = 0;
    for (size_t pos = 0; pos < piece.size();) {
      const size_t length = utf8_char(piece, pos, cp);
      const bool match = step.matcher == Matcher::kNumeric       ? is_numeric(cp)
                         : step.matcher == Matcher::kPunctuation ? is_punctuation(cp)
                                                                 : is_whitespace(cp);
      if (match) add_match(pos, pos + length);
      pos += length;
    }
  }
  if (done < piece.size()) out.push_back({done, piece.size(), false});
  if (step.invert) {
    for (Stretch& stretch : out) stretch.match = !stretch.match;
  }
}

// Groups `stretches` into pieces by `behavior` (Hugging Face's SplitDelimiterBehavior); a
// piece marked `match` afterwards is dropped.
void apply_behavior(Behavior behavior, std::vector<Stretch>& stretches) {
  if (behavior == Behavior::kIsolated || behavior == Behavior::kRemoved) {
    if (behavior == Behavior::kIsolated) {
      for (Stretch& stretch : stretches) stretch.match = false;
    }
    return;
  }
  std::vector<Stretch> grouped;
  grouped.reserve(stretches.size());
  bool previous_match = false;
  if (behavior == Behavior::kMergedWithNext) {
    for (size_t i = stretches.size(); i-- > 0;) {
      const Stretch& s = stretches[i];
      if (s.match && !previous_match && !grouped.empty()) {
        grouped.back().begin = s.begin;
      } else {
        grouped.push_back({s.begin, s.end, false});
      }
      previous_match = s.match;
    }
    stretches.assign(grouped.rbegin(), grouped.rend());
    return;
  }
  for (const Stretch& s : stretches) {
    const bool join =
        behavior == Behavior::kContiguous ? s.match == previous_match : s.match && !previous_match;
    if (join && !grouped.empty()) {
      grouped.back().end = s.end;
    } else {
      grouped.push_back({s.begin, s.end, false});
    }
    previous_match = s.match;
  }
  stretches = std::move(grouped);
}

// One Split-like step over every span of `words`.
void split_step(const Step& step, Words& words) {
  std::vector<Span> spans;
  spans.reserve(words.spans.size() * 2);
  std::vector<Stretch> stretches;
  for (size_t i = 0; i < words.spans.size(); ++i) {
    const Span& span = words.spans[i];
    find_stretches(step, words.word(i), stretches);
    apply_behavior(step.behavior, stretches);
    for (const Stretch& s : stretches) {
      if (s.match || s.end == s.begin) continue;
      spans.push_back({span.begin + s.begin, span.begin + s.end, span.at_start && s.begin == 0});
    }
  }
  words.spans = std::move(spans);
}

// Metaspace's rewrite, or ByteLevel's prefix space, over every span of `words`.
void rewrite_step(const Step& step, Words& words, Words& scratch) {
  scratch.text.clear();
  scratch.spans.clear();
  for (size_t i = 0; i < words.spans.size(); ++i) {
    const std::string_view piece = words.word(i);
    const size_t begin = scratch.text.size();
    if (step.kind == Step::Kind::kPrefixSpace) {
      if (!piece.starts_with(' ')) scratch.text.push_back(' ');
      scratch.text.append(piece);
    } else {
      const bool at_start = words.spans[i].at_start;
      const bool prepend = step.prepend == Step::Prepend::kAlways ||
                           (step.prepend == Step::Prepend::kFirst && at_start);
      // The replacement counts as already there when the piece starts with a space.
      if (prepend && !piece.starts_with(' ') && !piece.starts_with(step.replacement)) {
        scratch.text += step.replacement;
      }
      for (char c : piece) {
        if (c == ' ') {
          scratch.text += step.replacement;
        } else {
          scratch.text.push_back(c);
        }
      }
    }
    scratch.spans.push_back({begin, scratch.text.size(), words.spans[i].at_start});
  }
  std::swap(words.text, scratch.text);
  std::swap(words.spans, scratch.spans);
}

Behavior read_behavior(const JsonFile& file, const json& value, const std::string& where,
                       std::string_view fallback) {
  const std::string name = file.optional_string(value, where, "behavior", fallback);
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  file.fail(member_path(where, "behavior"),
            fmt::format("'{}' is not one of Isolated, Removed, MergedWithPrevious, "
                        "MergedWithNext and Contiguous",
                        name));
}

void read_metaspace(const JsonFile& file, const json& value, const std::string& where, Step& step) {
  step.kind = Step::Kind::kMetaspace;
  step.replacement = file.find_non_null(value, where, "replacement")
                         ? file.character(value, where, "replacement")
                         : std::string("\xE2\x96\x81");  // U+2581
  step.split = file.optional_boolean(value, where, "split", true);
  if (const json* scheme = file.find_non_null(value, where, "prepend_scheme")) {
    const std::string scheme_where = member_path(where, "prepend_scheme");
    const std::string& name = file.string(*scheme, scheme_where);
    if (name == "always") {
      step.prepend = Step::Prepend::kAlways;
    } else if (name == "first") {
      step.prepend = Step::Prepend::kFirst;
    } else if (name == "never") {
      step.prepend = Step::Prepend::kNever;
    } else {
      file.fail(scheme_where, fmt::format("'{}' is not one of always, first and never", name));
    }
  } else {
    step.prepend = file.optional_boolean(value, where, "add_prefix_space", true)
                       ? Step::Prepend::kAlways
                       : Step::Prepend::kNever;
  }
}

constexpr std::string_view kSupported =
    "only Split, Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace, ByteLevel and "
    "Sequence";

void read_step(const JsonFile& file, const json& value, const std::string& where,
               std::vector<Step>& steps, bool& byte_level) {
  const std::string& type = file.type(value, where);
  if (byte_level) {
    file.fail(where, fmt::format("(a {} step) follows ByteLevel; ByteLevel must be the last "
                                 "step, as it turns the text into the byte alphabet",
                                 type));
  }
  Step step;
  if (type == "Sequence") {
    const std::string list_where = member_path(where, "pretokenizers");
    const json& list = file.array(file.member(value, where, "pretokenizers"), list_where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_step(file, list[i], index_path(list_where, i), steps, byte_level);
    }
    return;
  } else if (type == "Split") {
    step.pattern =
        Pattern::read(file, file.member(value, where, "pattern"), member_path(where, "pattern"));
    step.behavior = read_behavior(file, value, where, "Isolated");
    step.invert = file.optional_boolean(value, where, "invert", false);
  } else if (type == "Digits") {
    step.matcher = Matcher::kNumeric;
    step.behavior = file.optional_boolean(value, where, "individual_digits", false)
                        ? Behavior::kIsolated
                        : Behavior::kContiguous;
  } else if (type == "Punctuation") {
    step.matcher = Matcher::kPunctuation;
    step.behavior = read_behavior(file, value, where, "Isolated");
  } else if (type == "Whitespace") {
    // Hugging Face's \w+|[^\w\s]+, with \w spelled out as Oniguruma's Unicode word class.
    step.pattern = Pattern(std::make_unique<Regex>(
        R"([\p{L}\p{M}\p{Nd}\p{Pc}]+|[^\p{L}\p{M}\p{Nd}\p{Pc}\s]+)", false, file.path(), where));
    step.behavior = Behavior::kRemoved;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step.matcher = Matcher::kWhitespace;
    step.behavior = Behavior::kRemoved;
  } else if (type == "Metaspace") {
    read_metaspace(file, value, where, step);
    const bool split = step.split;
    const std::string replacement = step.replacement;
    steps.push_back(std::move(step));
    if (split) {
      Step cut;
      cut.pattern = Pattern(replacement);
      cut.behavior = Behavior::kMergedWithNext;
      steps.push_back(std::move(cut));
    }
    return;
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (file.optional_boolean(value, where, "add_prefix_space", true)) {
      Step prefix;
      prefix.kind = Step::Kind::kPrefixSpace;
      steps.push_back(std::move(prefix));
    }
    if (!file.optional_boolean(value, where, "use_regex", true)) return;
    step.pattern = Pattern(std::make_unique<Regex>(kGpt2SplitPattern, false, file.path(),
                                                   member_path(where, "use_regex")));
  } else {
    file.fail(member_path(where, "type"),
              fmt::format("'{}' is not supported; {}", type, kSupported));
  }
  steps.push_back(std::move(step));
}

}  // namespace

PreTokenizer PreTokenizer::gpt2(const std::string& source) {
  PreTokenizer pre_tokenizer;
  Step step;
  step.pattern =
      Pattern(std::make_unique<Regex>(kGpt2SplitPattern, false, source, "GPT-2's pattern"));
  pre_tokenizer.steps_.push_back(std::move(step));
  pre_tokenizer.byte_level_ = true;
  return pre_tokenizer;
}

void PreTokenizer::split(std::string_view text, bool at_start, Words& out) const {
  out.text.assign(text);
  out.spans.clear();
  if (!text.empty()) out.spans.push_back({0, text.size(), at_start});
  for (const Step& step : steps_) {
    if (step.kind == Step::Kind::kSplit) {
      split_step(step, out);
    } else {
      rewrite_step(step, out, scratch_);
    }
  }
}

PreTokenizer read_pre_tokenizer(const JsonFile& file, const json& value, const std::string& where) {
  PreTokenizer pre_tokenizer;
  if (!value.is_null())
    read_step(file, value, where, pre_tokenizer.steps_, pre_tokenizer.byte_level_);
  return pre_tokenizer;
}

}  // namespace zt
