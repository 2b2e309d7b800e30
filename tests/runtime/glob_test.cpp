// runtime/glob: '*' any run (dots included, empty included), '?' one character, everything else
// literal, the whole name matched; on Hugging Face tensor names as zt.freeze writes them.
#include "runtime/glob.h"

#include <gtest/gtest.h>

#include <string>

namespace zt {
namespace {

TEST(GlobMatch, LiteralsMatchTheWholeName) {
  EXPECT_TRUE(glob_match("lm_head.weight", "lm_head.weight"));
  EXPECT_FALSE(glob_match("lm_head.weight", "lm_head.weights"));
  EXPECT_FALSE(glob_match("lm_head.weight", "lm_head.weigh"));
  EXPECT_FALSE(glob_match("lm_head.weight", "model.lm_head.weight"));
  EXPECT_FALSE(glob_match("LM_HEAD.weight", "lm_head.weight"));  // case-sensitive
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "x"));
  EXPECT_FALSE(glob_match("x", ""));
}

TEST(GlobMatch, StarMatchesAnyRunDotsIncluded) {
  EXPECT_TRUE(glob_match("model.embed_tokens.*", "model.embed_tokens.weight"));
  EXPECT_TRUE(glob_match("model.layers.0.*", "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.0.*", "model.layers.0.mlp.down_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.0.*", "model.layers.1.mlp.down_proj.weight"));
  // Block 1, not block 10: the dot after the index is literal.
  EXPECT_TRUE(glob_match("model.layers.1.*", "model.layers.1.input_layernorm.weight"));
  EXPECT_FALSE(glob_match("model.layers.1.*", "model.layers.10.input_layernorm.weight"));
  EXPECT_TRUE(glob_match("model.layers.1*", "model.layers.10.input_layernorm.weight"));
  EXPECT_TRUE(glob_match("*.bias", "transformer.h.3.attn.c_attn.bias"));
  EXPECT_FALSE(glob_match("*.bias", "transformer.h.3.attn.c_attn.weight"));
  EXPECT_TRUE(glob_match("*self_attn*", "model.layers.7.self_attn.o_proj.weight"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "anything.at.all"));
  EXPECT_TRUE(glob_match("**", "x"));
  EXPECT_TRUE(glob_match("a*", "a"));  // the empty run
  EXPECT_TRUE(glob_match("*a*b*", "xaxxbx"));
  EXPECT_FALSE(glob_match("*a*b*", "xbxxax"));
  EXPECT_TRUE(glob_match("model.*.weight", "model.norm.weight"));
  EXPECT_TRUE(glob_match("model.*.weight", "model.layers.2.mlp.gate_proj.weight"));
  EXPECT_FALSE(glob_match("model.*.weight", "model.weight"));
}

TEST(GlobMatch, QuestionMarkMatchesExactlyOneCharacter) {
  EXPECT_TRUE(glob_match("model.layers.?.mlp.*", "model.layers.3.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp.*", "model.layers.12.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.??.mlp.*", "model.layers.12.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("h.?", "h.."));  // '?' matches a dot too
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_FALSE(glob_match("a?", "a"));
  EXPECT_TRUE(glob_match("*?", "a"));
  EXPECT_FALSE(glob_match("*??", "a"));
}

TEST(GlobMatch, BacktracksToTheLastStar) {
  // The first 'b' after the '*' is not the one that matches: the '*' absorbs it and retries.
  EXPECT_TRUE(glob_match("a*bc", "abxbc"));
  EXPECT_TRUE(glob_match("*.weight", "a.weight.b.weight"));
  EXPECT_FALSE(glob_match("*.weight", "a.weight.b.weights"));
  EXPECT_TRUE(glob_match("*.layers.*.q_proj.*", "model.layers.0.self_attn.q_proj.weight"));
}

TEST(GlobMatch, NoExponentialBacktracking) {
  // A naive recursive matcher takes exponential time on this; the last-star rule is quadratic.
  const std::string name(10000, 'a');
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*b", name));
  EXPECT_TRUE(glob_match("*a*a*a*a*a*a*a*a*a*a", name));
}

}  // namespace
}  // namespace zt
