// The Jinja evaluator (internal to runtime/data/jinja*.cpp): runs a parsed template against a
// context, with Jinja2's scoping (each for-loop iteration, macro call and with block is a new
// scope; if blocks are not), its Undefined and the sandbox limits of jinja.h.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/data/jinja.h"
#include "runtime/data/jinja_ast.h"

namespace zt::jinja {

class Evaluator {
 public:
  Evaluator(const std::string& name, const Limits& limits, const RenderOptions& options);

  std::string render(const Body& body, const nlohmann::ordered_json& context);

  // For filters, tests and methods (jinja_filters.cpp, jinja_methods.cpp).
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, CallArgs& args);
  Value filter(const std::string& name, const Value& operand, CallArgs& args);
  bool test(const std::string& name, const Value& operand, CallArgs& args);
  // Counts `n` steps of work against limits.max_steps.
  void charge(int64_t n);
  // Refuses a string or list longer than limits.max_output_bytes.
  void check_size(size_t n, const char* what) const;
  // Counts loop iterations (and range() items) against limits.max_loop_iterations.
  void count_iterations(int64_t n);
  const Limits& limits() const { return limits_; }
  const RenderOptions& options() const { return options_; }

 private:
  using Frame = std::unordered_map<std::string, Value>;
  using Stack = std::vector<std::shared_ptr<Frame>>;
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void error(int line, const std::string& message) const;
  // Counts one level of evaluation nesting while alive: blocks inside macros inside blocks
  // could otherwise nest max_depth * max_depth deep and exhaust the stack.
  struct Nest {
    explicit Nest(Evaluator& ev);
    ~Nest() { --ev.nesting_; }
    Evaluator& ev;
  };
  Value lookup(const std::string& name) const;
  void assign(const std::vector<std::string>& targets, const Value& value);
  void append(const std::string& s);
  std::string capture(const Body& body);

  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void exec_call_block(const Stmt& s);
  Value make_macro(const Stmt& s);
  Value run_macro(const Stmt& s, CallArgs& args, const Stack& scope);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_slice(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first, const std::string& what);
  void install_globals(Frame& f);

  const std::string& name_;
  const Limits& limits_;
  const RenderOptions& options_;
  Stack stack_;
  std::string out_;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;  // statements and expressions being evaluated, one inside the other
  const Value* block_operand_ = nullptr;  // a filter block's rendered body
};

// Python semantics helpers shared by the evaluator, filters and methods.
List iterate(const Value& v);                                           // for x in v
bool contains(const Value& container, const Value& item);               // item in container
int64_t length(const Value& v);                                         // len(v)
Value arith(const std::string& op, const Value& a, const Value& b);     // + - * / // % **
std::string percent_format(const std::string& fmt, const Value& args);  // fmt % args

// Filters, tests and methods (jinja_filters.cpp, jinja_methods.cpp).
Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);
// `obj.name` when it is a method (str, dict and list methods); undefined otherwise.
Value method(Evaluator& ev, const Value& obj, const std::string& name);
// The global functions: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Evaluator& ev, std::unordered_map<std::string, Value>& frame);

}  // namespace zt::jinja
