// A Jinja2 template engine of our own, for the chat templates models ship (chat_template.h):
// the subset of Jinja2 those templates use, rendering byte for byte as Jinja2 does with the
// environment transformers builds (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// the loopcontrols extension, the raise_exception and strftime_now globals, its tojson filter).
//
// Statements: if/elif/else, for (unpacking, `if` filter, else, loop.*), break, continue, set
// (names, tuples, namespace attributes, block set), macro (defaults, caller), call, filter
// blocks, with, raw, generation (rendered as its body), comments. Expressions: literals,
// lists, tuples, dicts, attribute and item access, slices, calls with keyword arguments,
// filters, tests, `x if c else y`, arithmetic, `~`, comparisons, in/not in, and/or/not.
// Anything else (include, import, extends, block, recursive loops, unknown filters/tests/tags)
// is refused when the template is parsed, with one zt::Error (kInput) naming the line.
//
// Templates are code that comes with a downloaded model, so rendering is sandboxed: nothing
// reads files, the environment or the network; lists, dicts and strings are never modified in
// place; and Limits bounds nesting depth, loop iterations, work and output, each overrun being
// one clear kInput error. Runtime errors (undefined attribute access, type errors,
// raise_exception) are kInput errors naming the template line too.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zt::jinja {

struct Limits {
  int max_depth = 100;                    // nested blocks/expressions; macro call depth
  int64_t max_loop_iterations = 1000000;  // for-loop iterations and range() items, all loops
  int64_t max_steps = 20000000;           // expressions and statements evaluated
  size_t max_output_bytes = 64u << 20;    // the rendered text; also any one string or list
};

struct RenderOptions {
  // strftime_now's clock (seconds since the epoch, local time); the system clock when unset.
  std::function<std::time_t()> now;
};

class Template {
 public:
  // Lexes and parses; throws zt::Error (kInput) "template <name> line N: ..." on a syntax
  // error or an unsupported construct.
  explicit Template(std::string_view source, std::string name = "template", Limits limits = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the top-level variables of `context` (an object). Throws zt::Error (kInput)
  // naming the template line on a runtime error or an exceeded limit.
  std::string render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
  std::string name_;
  Limits limits_;
};

}  // namespace zt::jinja
