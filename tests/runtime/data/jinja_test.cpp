// The Jinja engine (runtime/data/jinja.h), piece by piece: whitespace control, expressions
// and Python's semantics, Undefined, scoping, loops, macros, filters, tests, methods, tojson;
// refusals of what it does not implement, each one kInput error naming the template line; and
// the sandbox limits. Expected texts are jinja2 3.1's renders with transformers' settings.
#include "runtime/data/jinja.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/status.h"

namespace zt::jinja {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::string render(const std::string& src, const std::string& context = "{}",
                   const Limits& limits = {}, const RenderOptions& options = {}) {
  return Template(src, "t", limits).render(OrderedJson::parse(context), options);
}

// The message of the kInput error rendering `src` throws ("" when it renders).
std::string error_of(const std::string& src, const std::string& context = "{}",
                     const Limits& limits = {}) {
  try {
    render(src, context, limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    return e.message();
  }
  return "";
}

TEST(JinjaTest, TrimsAndStripsBlocksAsTransformersConfiguresJinja) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  // Not after {{ }}; the indentation before {{ }} stays.
  EXPECT_EQ(render("  {{ 1 }}\n{{ 2 }}"), "  1\n2");
  // '-' strips all whitespace on its side, '+' keeps it.
  EXPECT_EQ(render("a  \n {%- if true -%} \n b {{- ' c' -}}\n d{% endif %}"), "ab cd");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("{% if true +%}\nb{% endif %}"), "\nb");
  // Comments trim like blocks; one trailing newline of the template is dropped; CRLF is "\n".
  EXPECT_EQ(render("  {# note #}\nx\n"), "x");
  EXPECT_EQ(render("a\r\nb\r\n\r\n"), "a\nb\n");
  // A tag not alone on its line keeps what precedes it.
  EXPECT_EQ(render("x {% if true %}y{% endif %}"), "x y");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaTest, EvaluatesExpressionsWithPythonSemantics) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"),
            "7 9 64 4");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 2 }}"),
            "3 -4 2 3.5 3.0");
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 2.5e3 }}"),
            "1.0 1e+20 1e-05 0.30000000000000004 1000 2500.0");
  // Filters bind tighter than arithmetic; `~` converts to strings.
  EXPECT_EQ(render("{{ xs|length - 1 }} {{ 'n=' ~ 3 ~ none }}", R"({"xs": [1, 2, 3]})"),
            "2 n=3None");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}"),
            "True False True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True False True");
  EXPECT_EQ(
      render("{{ 'y' if false else 'n' }}|{{ 'y' if false }}|{{ none or 'd' }}|{{ 0 and 1 }}"),
      "n||d|0");
  EXPECT_EQ(render(R"({{ 'it\'s' }} {{ "a\tb\n" }} {{ '\u00e9\x41' }} {{ 'a' 'b' }})"),
            "it's a\tb\n éA ab");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 2.0] }} {{ {'a': [1]} }} {{ (1, 2) }}"),
            "[1, 'a', None, True, 2.0] {'a': [1]} (1, 2)");
  EXPECT_EQ(render("{{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ [1,2,3][-1] }} {{ [1,2,3][5:] }}"),
            "él cba 3 []");
  EXPECT_EQ(render("{{ 'ab' * 2 }} {{ [0] * 2 }} {{ [1] + [2] }} {{ '%s-%03d' % ('x', 7) }}"),
            "abab [0, 0] [1, 2] x-007");
}

TEST(JinjaTest, UndefinedIsEmptyAndFalsyButNotAnObject) {
  EXPECT_EQ(render("[{{ nope }}] {{ nope is defined }} {{ not nope }} {{ nope|length }}"),
            "[] False True 0");
  EXPECT_EQ(render("{{ m.missing is defined }} {{ m['missing'] is none }} {{ m.k }}",
                   R"({"m": {"k": "v"}})"),
            "False False v");
  EXPECT_EQ(render("{% for x in nope %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(error_of("line 1\n{{ nope.attr }}"), "template t line 2: 'nope' is undefined");
  EXPECT_EQ(error_of("{{ m.a.b }}", R"({"m": {}})"),
            "template t line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ nope + 'x' }}"), "template t line 1: 'nope' is undefined");
  EXPECT_EQ(error_of("{{ [][0].role }}"), "template t line 1: 'list object' has no element 0");
}

TEST(JinjaTest, ScopesAsJinja2Does) {
  // A set inside a loop stays there (each iteration starts afresh); a namespace carries out.
  EXPECT_EQ(render("{% set x = 0 %}{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{{ x }}"
                   "{% set x = i %}{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "000 3");
  // A set inside an if is the enclosing scope's.
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t %}in {{ 1 + 1 }}{% endset %}[{{ t }}]"), "[in 2]");
  EXPECT_EQ(render("{% with v = 3 %}{{ v }}{% endwith %}[{{ v }}]"), "3[]");
  EXPECT_EQ(error_of("{% set s = 'x' %}{% set s.a = 1 %}"),
            "template t line 1: cannot assign attribute 'a' on 's': not a namespace");
}

TEST(JinjaTest, LoopsWithLoopVariablesFiltersAndControl) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }} {% endfor %}"),
            "103103 212003 321013 ");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "2/2 4/2 ");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   R"({"d": {"z": 1, "a": 2}})"),
            "z=1;a=2;");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.previtem }}>{{ loop.cycle('a','b') }} "
                   "{% endfor %}"),
            ">a 1>b 2>a ");
}

TEST(JinjaTest, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro m(a, b='d') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}"
                   "{{ m(b=3, a=4) }}"),
            "<1d><12><43>");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}\n{{ m(1, 2) }}"),
            "template t line 2: macro 'm' takes at most 1 arguments (2 given)");
}

TEST(JinjaTest, FiltersTestsAndMethods) {
  const std::string ctx =
      R"({"ms": [{"role": "user", "n": 2}, {"role": "system", "n": 1}, {"role": "user", "n": 3}]})";
  EXPECT_EQ(render("{{ ms|map(attribute='role')|join(',') }} {{ ms|selectattr('role', 'equalto', "
                   "'user')|list|length }} {{ ms|rejectattr('role', 'in', ['user'])|map(attribute="
                   "'n')|first }} {{ ms|sort(attribute='n')|map(attribute='n')|list }} "
                   "{{ ms|map(attribute='role')|unique|list }} {{ ms|sum(attribute='n') }}",
                   ctx),
            "user,system,user 2 1 [1, 2, 3] ['user', 'system'] 6");
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}"
                   "|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aaa'|replace('a', 'b', "
                   "2) }}|{{ [1,2]|first }}{{ [1,2]|last }}|{{ none|default('d') }}{{ ''|d('e', "
                   "true) }}|{{ '12'|int + 1 }}|{{ 'x'|int(7) }}|{{ 3|string ~ 1 }}"),
            "a b|hi|ABab|Hello World|Hello|bba|12|Nonee|13|7|31");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'x'|indent(2, true) }}"), "a\n  b\n\n  c|  x");
  EXPECT_EQ(
      render("{{ 3 is odd }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} "
             "{{ 1 is number }} {{ true is boolean }} {{ none is none }} {{ 9 is divisibleby 3 "
             "}} {{ 1 is integer }} {{ 1.5 is float }} {{ 'a' is in 'cat' }}"),
      "True True True True True True True True True True True");
  EXPECT_EQ(render("{{ ' a '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
                   "{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ '\\n\\nx\\n'"
                   ".lstrip('\\n') }}|{{ 'hi you'.title() }}|{{ d.get('k') }}{{ d.get('z', 0) }}"
                   "|{{ d.keys()|list }}|{{ 'abcb'.count('b') }}{{ 'abc'.find('c') }}",
                   R"({"d": {"k": 1}})"),
            "a|['a', 'b', '', 'c']|['a', 'b']|TrueTrue|x\n|Hi You|10|['k']|22");
}

TEST(JinjaTest, TojsonIsTransformersTojson) {
  const std::string ctx = R"({"v": {"b": "é\"\n", "a": [1, 2.5, null, true]}})";
  EXPECT_EQ(render("{{ v|tojson }}", ctx), R"({"b": "é\"\n", "a": [1, 2.5, null, true]})");
  EXPECT_EQ(render("{{ v|tojson(indent=2) }}", ctx),
            "{\n  \"b\": \"é\\\"\\n\",\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(render("{{ v|tojson(sort_keys=true, ensure_ascii=true) }}", ctx),
            R"({"a": [1, 2.5, null, true], "b": "\u00e9\"\n"})");
  EXPECT_EQ(
      render("{{ v.a|tojson(separators=(',', ':')) }} {{ {}|tojson }} {{ []|tojson(indent=2) }}",
             ctx),
      "[1,2.5,null,true] {} []");
  EXPECT_EQ(error_of("{{ nope|tojson }}"),
            "template t line 1: tojson: Object of type Undefined is not JSON serializable");
}

TEST(JinjaTest, GlobalsOfTransformers) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1) }}"),
            "[0, 1, 2] [1, 3, 5] {'a': 1}");
  RenderOptions options;
  options.now = [] { return std::time_t{86400 * 365}; };  // 1971-01-01 (UTC)
  EXPECT_EQ(render("{{ strftime_now('%Y') }}", "{}", {}, options).substr(0, 3), "197");
  EXPECT_EQ(error_of("{{ raise_exception('bad role') }}"),
            "template t line 1: the template raised an error: bad role");
}

TEST(JinjaTest, RefusesWhatItDoesNotImplementNamingTheLine) {
  EXPECT_EQ(error_of("a\n{% include 'x.jinja' %}"),
            "template t line 2: 'include' is not supported: a chat template may not load other "
            "templates");
  EXPECT_EQ(error_of("{% extends 'base' %}"),
            "template t line 1: 'extends' is not supported: a chat template may not load other "
            "templates");
  EXPECT_EQ(error_of("\n\n{% block b %}{% endblock %}"),
            "template t line 3: 'block' is not supported: a chat template may not use template "
            "inheritance");
  EXPECT_EQ(error_of("{% for x in y recursive %}{% endfor %}"),
            "template t line 1: recursive for loops are not supported");
  EXPECT_EQ(error_of("\n{{ x|urlize }}"),
            "template t line 2: unknown or unsupported filter 'urlize'");
  EXPECT_EQ(error_of("{{ x is escaped }}"),
            "template t line 1: unknown or unsupported test 'escaped'");
  EXPECT_EQ(error_of("{% do x %}"), "template t line 1: unknown or unsupported tag 'do'");
  EXPECT_EQ(error_of("{% break %}"), "template t line 1: 'break' outside a for loop");
  EXPECT_EQ(error_of("{% if x %}\nno end"),
            "template t line 2: the template ends before 'elif' "
            "or 'else' or 'endif'");
  EXPECT_EQ(error_of("{{ x"), "template t line 1: a '{{' tag is never closed with '}}'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "template t line 1: a string literal is never closed");
  EXPECT_EQ(error_of("{{ (1 }}"), "template t line 1: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{{ 1 ] }}"), "template t line 1: unexpected ']'");
  // The sandbox: no modifying methods, no private attributes.
  EXPECT_EQ(error_of("{{ xs.append(1) }}", R"({"xs": []})"),
            "template t line 1: access to attribute 'append' of 'list' object is unsafe "
            "(templates may not modify their input)");
  EXPECT_EQ(error_of("{{ ''.__class__ }}"),
            "template t line 1: access to attribute '__class__' of 'str' object is unsafe");
}

TEST(JinjaTest, LimitsBoundLoopsDepthOutputAndWork) {
  Limits small;
  small.max_loop_iterations = 1000;
  small.max_depth = 20;
  small.max_output_bytes = 4096;
  small.max_steps = 100000;
  EXPECT_EQ(error_of("{% for i in range(2000) %}{% endfor %}", "{}", small),
            "template t line 1: the template loops more than 1000 times (the limit)");
  EXPECT_EQ(error_of("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}",
                     "{}", small),
            "template t line 1: the template loops more than 1000 times (the limit)");
  EXPECT_EQ(
      error_of("{{ " + std::string(30, '(') + "1" + std::string(30, ')') + " }}", "{}", small),
      "template t line 1: nested more than 20 levels deep");
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "{}", small),
            "template t line 1: macro calls nested more than 20 deep (the limit)");
  EXPECT_EQ(error_of("{% for i in range(450) %}{{ 'x' * 10 }}{% endfor %}", "{}", small),
            "template t line 1: the output is over the limit of 4096 bytes");
  EXPECT_EQ(error_of("{{ 'x' * 5000 }}", "{}", small),
            "template t line 1: a string of 5000 bytes or items is over the limit of 4096");
  // Exponential work within the depth limit: two calls per level.
  EXPECT_EQ(error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                     "{% endmacro %}{{ f(19) }}",
                     "{}", small),
            "template t line 1: the template takes more than 100000 steps to render (the limit)");
  // Blocks nested in macros nested in blocks: bounded by 10 * max_depth levels in all.
  std::string deep = "{% macro f(n) %}";
  for (int i = 0; i < 8; ++i) deep += "{% if true %}";
  deep += "{{ f(n) }}";
  for (int i = 0; i < 8; ++i) deep += "{% endif %}";
  deep += "{% endmacro %}{{ f(1) }}";
  EXPECT_EQ(error_of(deep, "{}", small),
            "template t line 1: the template nests more than 200 levels deep while rendering (the "
            "limit)");
  EXPECT_EQ(error_of("{{ 2 ** 64 }}"),
            "template t line 1: integer overflow (values beyond 64 bits are not supported)");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "template t line 1: integer division or modulo by zero");
}

}  // namespace
}  // namespace zt::jinja
