// The Jinja evaluator: statements, expressions, scopes, macros. See jinja_eval.h.
#include "runtime/data/jinja_eval.h"

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt::jinja {

Evaluator::Evaluator(const std::string& name, const Limits& limits, const RenderOptions& options)
    : name_(name), limits_(limits), options_(options) {}

void Evaluator::error(int line, const std::string& message) const {
  throw_input(fmt::format("template {} line {}: {}", name_, line, message));
}

Evaluator::Nest::Nest(Evaluator& e) : ev(e) {
  if (++ev.nesting_ > 10 * ev.limits_.max_depth) {
    --ev.nesting_;
    fail(fmt::format("the template nests more than {} levels deep while rendering (the limit)",
                     10 * ev.limits_.max_depth));
  }
}

void Evaluator::charge(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    fail(fmt::format("the template takes more than {} steps to render (the limit)",
                     limits_.max_steps));
}

void Evaluator::check_size(size_t n, const char* what) const {
  if (n > limits_.max_output_bytes)
    fail(fmt::format("{} of {} bytes or items is over the limit of {}", what, n,
                     limits_.max_output_bytes));
}

void Evaluator::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    fail(fmt::format("the template loops more than {} times (the limit)",
                     limits_.max_loop_iterations));
}

std::string Evaluator::render(const Body& body, const nlohmann::ordered_json& context) {
  auto globals = std::make_shared<Frame>();
  add_globals(*this, *globals);
  if (!context.is_object())
    throw_input(fmt::format("template {}: the context is not an object", name_));
  try {
    for (auto it = context.begin(); it != context.end(); ++it)
      (*globals)[it.key()] = Value::from_json(it.value());
  } catch (const EvalError& e) {
    throw_input(fmt::format("template {}: {}", name_, e.message));
  }
  stack_ = {globals, std::make_shared<Frame>()};
  exec(body);
  return std::move(out_);
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& value) {
  Frame& frame = *stack_.back();
  if (targets.size() == 1) {
    frame[targets[0]] = value;
    return;
  }
  const List items = iterate(value);
  if (items.size() != targets.size())
    fail(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = items[i];
}

void Evaluator::append(const std::string& s) {
  out_ += s;
  if (out_.size() > limits_.max_output_bytes)
    fail(fmt::format("the output is over the limit of {} bytes", limits_.max_output_bytes));
}

std::string Evaluator::capture(const Body& body) {
  std::string saved = std::move(out_);
  out_.clear();
  exec(body);
  std::string captured = std::move(out_);
  out_ = std::move(saved);
  return captured;
}

Evaluator::Flow Evaluator::exec(const Body& body) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s) {
  try {
    charge(1);
    const Nest nest(*this);
    switch (s.kind) {
      case StmtKind::kText: append(s.text); break;
      case StmtKind::kOutput: append(to_str(eval(*s.expr))); break;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (eval(*s.conds[i]).truthy()) return exec(s.bodies[i]);
        return exec(s.else_body);
      case StmtKind::kFor: return exec_for(s);
      case StmtKind::kSet: exec_set(s); break;
      case StmtKind::kMacro: (*stack_.back())[s.text] = make_macro(s); break;
      case StmtKind::kCallBlock: exec_call_block(s); break;
      case StmtKind::kFilterBlock: {
        const Value body = Value::string(capture(s.body));
        const Value* saved = block_operand_;
        block_operand_ = &body;
        const Value result = eval(*s.expr);
        block_operand_ = saved;
        append(to_str(result));
        break;
      }
      case StmtKind::kWith: {
        auto frame = std::make_shared<Frame>();
        for (size_t i = 0; i < s.targets.size(); ++i) (*frame)[s.targets[i]] = eval(*s.values[i]);
        stack_.push_back(frame);
        const Flow f = exec(s.body);
        stack_.pop_back();
        return f;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kBlock: return exec(s.body);
    }
  } catch (const EvalError& e) {
    error(s.line, e.message);
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s) {
  List items = iterate(eval(*s.expr));
  if (s.cond) {
    List kept;
    for (const Value& item : items) {
      count_iterations(1);
      stack_.push_back(std::make_shared<Frame>());
      assign(s.targets, item);
      const bool keep = eval(*s.cond).truthy();
      stack_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body);
  const int64_t n = static_cast<int64_t>(items.size());
  auto cycle_items = std::make_shared<int64_t>(0);
  for (int64_t i = 0; i < n; ++i) {
    count_iterations(1);
    stack_.push_back(std::make_shared<Frame>());
    assign(s.targets, items[i]);
    Dict loop;
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(n - i));
    loop.set("revindex0", Value::integer(n - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [i](CallArgs& a) {
               if (a.positional.empty()) fail("loop.cycle() needs at least one argument");
               return a.positional[i % a.positional.size()];
             }));
    (*stack_.back())["loop"] = Value::object(std::move(loop), "LoopContext");
    const Flow f = exec(s.body);
    stack_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::exec_set(const Stmt& s) {
  const Value value = s.expr ? eval(*s.expr) : Value::string(capture(s.body));
  if (s.text.empty()) {
    assign(s.targets, value);
    return;
  }
  const Value ns = lookup(s.targets[0]);
  if (!ns.is_object() || ns.hint() != "Namespace")
    fail(
        fmt::format("cannot assign attribute '{}' on '{}': not a namespace", s.text, s.targets[0]));
  ns.mutable_object().set(s.text, value);
}

Value Evaluator::make_macro(const Stmt& s) {
  const Stack scope = {stack_[0], stack_[1]};
  const Stmt* def = &s;
  return Value::callable(
      s.text, [this, def, scope](CallArgs& args) { return run_macro(*def, args, scope); });
}

// Binds `args` to the parameters of macro (or caller) `s` and renders its body in a new
// scope above `scope`.
Value Evaluator::run_macro(const Stmt& s, CallArgs& args, const Stack& scope) {
  if (call_depth_ >= limits_.max_depth)
    fail(fmt::format("macro calls nested more than {} deep (the limit)", limits_.max_depth));
  const std::string what = s.kind == StmtKind::kMacro ? "macro '" + s.text + "'" : "caller()";
  if (args.positional.size() > s.targets.size())
    fail(fmt::format("{} takes at most {} arguments ({} given)", what, s.targets.size(),
                     args.positional.size()));
  auto frame = std::make_shared<Frame>();
  Stack saved = std::move(stack_);
  stack_ = scope;
  stack_.push_back(frame);
  ++call_depth_;
  struct Restore {
    Evaluator& ev;
    Stack& saved;
    ~Restore() {
      ev.stack_ = std::move(saved);
      --ev.call_depth_;
    }
  } restore{*this, saved};
  for (const auto& [k, v] : args.keyword) {
    const bool known =
        k == "caller" || std::find(s.targets.begin(), s.targets.end(), k) != s.targets.end();
    if (!known) fail(fmt::format("{} has no parameter '{}'", what, k));
    (*frame)[k] = v;
  }
  for (size_t i = 0; i < s.targets.size(); ++i) {
    if (i < args.positional.size()) {
      if (frame->count(s.targets[i]))
        fail(fmt::format("{} got parameter '{}' twice", what, s.targets[i]));
      (*frame)[s.targets[i]] = args.positional[i];
    } else if (!frame->count(s.targets[i])) {
      (*frame)[s.targets[i]] =
          s.values[i]
              ? eval(*s.values[i])
              : Value::undefined(fmt::format("parameter '{}' was not provided", s.targets[i]));
    }
  }
  return Value::string(capture(s.body));
}

void Evaluator::exec_call_block(const Stmt& s) {
  const Stack scope = stack_;
  const Stmt* def = &s;
  Value caller = Value::callable(
      "caller", [this, def, scope](CallArgs& args) { return run_macro(*def, args, scope); });
  const Expr& call_expr = *s.expr;
  CallArgs args = eval_args(call_expr, 1, "the call");
  args.keyword.emplace_back("caller", caller);
  append(to_str(call(eval(*call_expr.args[0]), args)));
}

Value Evaluator::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail(fn.hint());
  if (!fn.is_callable()) fail(fmt::format("'{}' object is not callable", fn.type_name()));
  charge(1);
  return fn.as_callable().fn(args);
}

Value Evaluator::filter(const std::string& name, const Value& operand, CallArgs& args) {
  return apply_filter(*this, name, operand, args);
}

bool Evaluator::test(const std::string& name, const Value& operand, CallArgs& args) {
  return apply_test(*this, name, operand, args);
}

}  // namespace zt::jinja
