// Template: lex, parse once, render many times. See jinja.h.
#include "runtime/data/jinja.h"

#include "runtime/data/jinja_ast.h"
#include "runtime/data/jinja_eval.h"
#include "runtime/data/jinja_lexer.h"

namespace zt::jinja {

struct Template::Parsed {
  Body body;
};

Template::Template(std::string_view source, std::string name, Limits limits)
    : parsed_(std::make_unique<Parsed>()), name_(std::move(name)), limits_(limits) {
  parsed_->body = parse(lex(source, name_), name_, limits_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  Evaluator ev(name_, limits_, options);
  return ev.render(parsed_->body, context);
}

}  // namespace zt::jinja
