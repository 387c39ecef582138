// Feature-by-feature tests of the Jinja engine: each case's expected output is what jinja2 renders with
// transformers' settings (tests/jinja_feature_cases.inc, made by tests/tools/gen_jinja_cases.py).
#include <gtest/gtest.h>

#include <string>

#include "chat/template.h"
#include "core/error.h"

namespace {

struct FeatureCase {
  const char* name;
  const char* tmpl;
  const char* ctx;
  const char* kind;  // rendered | raised | error
  const char* expected;
};

const FeatureCase kCases[] = {
#include "jinja_feature_cases.inc"
};

std::string render(const std::string& tmpl, const std::string& ctx) {
  return lily::ChatTemplate::from_string(tmpl).render(nlohmann::ordered_json::parse(ctx));
}

}  // namespace

TEST(JinjaFeatures, MatchJinja2) {
  int checked = 0;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    std::string kind = c.kind;
    if (kind == "rendered") {
      try {
        EXPECT_EQ(render(c.tmpl, c.ctx), c.expected) << c.tmpl;
      } catch (const lily::Error& e) {
        ADD_FAILURE() << "threw: " << e.what() << "\ntemplate: " << c.tmpl;
      }
    } else {
      try {
        std::string out = render(c.tmpl, c.ctx);
        ADD_FAILURE() << "expected an error (" << c.expected << "), rendered: " << out;
      } catch (const lily::Error& e) {
        std::string msg = e.what();
        if (kind == "raised") {
          EXPECT_EQ(msg, c.expected);
        } else {
          // jinja2's message without its exception class name; ours adds the position in front.
          std::string want = c.expected;
          want = want.substr(want.find(": ") + 2);
          if (want.back() == '.' && msg.back() != '.') want.pop_back();
          EXPECT_NE(msg.find(want), std::string::npos) << "ours: " << msg << "\njinja2: " << c.expected;
          EXPECT_NE(msg.find("line 1, column"), std::string::npos) << msg;
        }
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(JinjaErrors, BadTemplatesGiveErrorsWithPositions) {
  struct Bad {
    const char* tmpl;
    const char* where;  // expected "line L, column C"
    const char* what;
  };
  const Bad bad[] = {
      {"{% if x %}never closed", "line 1, column 4", "not closed"},
      {"a\n{% for x in y %}\n{{ x }}", "line 2, column 4", "'for' block is not closed"},
      {"{{ 1 + }}", "line 1, column 8", "unexpected"},
      {"{{ x", "line 1, column 1", "expected '}}'"},
      {"{% endif %}", "line 1, column 4", "unknown tag 'endif'"},
      {"{% frobnicate %}", "line 1, column 4", "unknown tag"},
      {"x\n  {{ 'unterminated }}", "line 2, column 6", "end of string"},
      {"{# never closed", "line 1, column 1", "comment"},
      {"{{ (1, 2 }}", "line 1, column 11", "unexpected '}'"},
      {"{{ (1, 2) ]}}", "line 1, column 11", "unexpected ']'"},
      {"{{ f(1 2) }}", "line 1, column 8", "expected ','"},
      {"{% set 1 = 2 %}", "line 1, column 8", "cannot assign"},
      {"{% break %}", "line 1, column 4", "outside of a loop"},
      {"{{ a ? b }}", "line 1, column 6", "unexpected character"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "line 1, column 17", "non-default argument"},
      {"{% if a %}{% else %}{% else %}{% endif %}", "line 1, column 24", "unknown tag 'else'"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.tmpl);
    try {
      lily::ChatTemplate::from_string(b.tmpl);
      ADD_FAILURE() << "parsed without error";
    } catch (const lily::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(b.where), std::string::npos) << msg;
      EXPECT_NE(msg.find(b.what), std::string::npos) << msg;
    }
  }
}

TEST(JinjaErrors, RuntimeErrorsNamePosition) {
  try {
    render("line one\n  {{ 1 | no_such_filter }}", "{}");
    FAIL();
  } catch (const lily::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2, column 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_filter"), std::string::npos) << e.what();
  }
}

TEST(JinjaErrors, DeepNestingAndRecursionAreGuarded) {
  std::string deep(5000, '(');
  EXPECT_THROW(lily::ChatTemplate::from_string("{{ " + deep + "1 }}"), lily::Error);
  std::string ifs;
  for (int k = 0; k < 1000; ++k) ifs += "{% if true %}";
  EXPECT_THROW(lily::ChatTemplate::from_string(ifs), lily::Error);
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}"), lily::Error);
  EXPECT_THROW(render("{{ range(100000000) | length }}", "{}"), lily::Error);
  EXPECT_THROW(render("{{ 'x' * 1000000000 }}", "{}"), lily::Error);
  EXPECT_THROW(render("{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}", "{}"), lily::Error);
  EXPECT_THROW(render("{{ 2 ** 64 }}", "{}"), lily::Error);
}

TEST(JinjaErrors, RaiseExceptionMessageIsExact) {
  try {
    render("{{ raise_exception('System message must be at the beginning.') }}", "{}");
    FAIL();
  } catch (const lily::Error& e) {
    EXPECT_STREQ(e.what(), "System message must be at the beginning.");
  }
}

TEST(JinjaGlobals, StrftimeNowFormats) {
  std::string y = render("{{ strftime_now('%Y') }}", "{}");
  ASSERT_EQ(y.size(), 4u);
  EXPECT_GE(std::stoi(y), 2024);
  EXPECT_EQ(render("{{ strftime_now('%%') }}", "{}"), "%");
}
