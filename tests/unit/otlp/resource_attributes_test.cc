// OTEL_RESOURCE_ATTRIBUTES parsing: pairs in order, blanks trimmed, percent-decoding of keys and
// values, and junk entries skipped with one error line each; the resource context made of the
// environment.
#include "otlp/resource_attributes.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "unit/otlp/log_capture.h"

namespace ember {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseResourceAttributesTest, PairsInOrder) {
  const ParsedResourceAttributes parsed =
      ParseResourceAttributes("deployment.environment=prod,service.namespace=shop");
  EXPECT_THAT(parsed.attributes, ElementsAre(ResourceAttribute{"deployment.environment", "prod"},
                                             ResourceAttribute{"service.namespace", "shop"}));
  EXPECT_THAT(parsed.errors, IsEmpty());
}

TEST(ParseResourceAttributesTest, EmptyTextAndEmptyEntriesGiveNothing) {
  for (const char* text : {"", " ", ",,,", " , , "}) {
    const ParsedResourceAttributes parsed = ParseResourceAttributes(text);
    EXPECT_THAT(parsed.attributes, IsEmpty()) << text;
    EXPECT_THAT(parsed.errors, IsEmpty()) << text;
  }
  EXPECT_THAT(ParseResourceAttributes("a=1,,b=2").attributes,
              ElementsAre(ResourceAttribute{"a", "1"}, ResourceAttribute{"b", "2"}));
}

TEST(ParseResourceAttributesTest, TrimsBlanksAroundEntriesKeysAndValues) {
  EXPECT_THAT(ParseResourceAttributes(" a = 1 ,\tb=two words ").attributes,
              ElementsAre(ResourceAttribute{"a", "1"}, ResourceAttribute{"b", "two words"}));
}

TEST(ParseResourceAttributesTest, PercentDecodesKeysAndValues) {
  const ParsedResourceAttributes parsed = ParseResourceAttributes(
      "team%3Downer=a%2Cb%3Dc,name=caf%C3%A9%20bar,plus=a+b,pct=100%25,upper=%2f%2F");
  EXPECT_THAT(parsed.attributes,
              ElementsAre(ResourceAttribute{"team=owner", "a,b=c"},
                          ResourceAttribute{"name", "caf\xC3\xA9 bar"},
                          ResourceAttribute{"plus", "a+b"},  // not form encoding
                          ResourceAttribute{"pct", "100%"}, ResourceAttribute{"upper", "//"}));
  EXPECT_THAT(parsed.errors, IsEmpty());
}

TEST(ParseResourceAttributesTest, DecodedBytesThatAreNotUtf8BecomeReplacementCharacters) {
  EXPECT_THAT(ParseResourceAttributes("k=a%FFb").attributes,
              ElementsAre(ResourceAttribute{"k",
                                            "a\xEF\xBF\xBD"
                                            "b"}));
}

TEST(ParseResourceAttributesTest, EverythingAfterTheFirstEqualsIsTheValue) {
  EXPECT_THAT(ParseResourceAttributes("url=http://x/?a=b").attributes,
              ElementsAre(ResourceAttribute{"url", "http://x/?a=b"}));
}

TEST(ParseResourceAttributesTest, EmptyValueIsKept) {
  EXPECT_THAT(ParseResourceAttributes("a=").attributes, ElementsAre(ResourceAttribute{"a", ""}));
}

TEST(ParseResourceAttributesTest, LaterEntryReplacesTheValueAndKeepsThePosition) {
  EXPECT_THAT(ParseResourceAttributes("a=1,b=2,a=3").attributes,
              ElementsAre(ResourceAttribute{"a", "3"}, ResourceAttribute{"b", "2"}));
}

TEST(ParseResourceAttributesTest, JunkEntriesAreSkippedAndReportedOneLineEach) {
  const ParsedResourceAttributes parsed =
      ParseResourceAttributes("good=1,novalue,=orphan,bad=%zz,short=%4,trailing=100%,also=2");
  EXPECT_THAT(parsed.attributes,
              ElementsAre(ResourceAttribute{"good", "1"}, ResourceAttribute{"also", "2"}));
  EXPECT_THAT(parsed.errors,
              ElementsAre(AllOf(HasSubstr("OTEL_RESOURCE_ATTRIBUTES"), HasSubstr("\"novalue\""),
                                HasSubstr("no '='"), HasSubstr("skipped")),
                          AllOf(HasSubstr("\"=orphan\""), HasSubstr("empty key")),
                          AllOf(HasSubstr("\"bad=%zz\""), HasSubstr("two hex digits")),
                          AllOf(HasSubstr("\"short=%4\""), HasSubstr("two hex digits")),
                          AllOf(HasSubstr("\"trailing=100%\""), HasSubstr("%25"))));
  for (const std::string& error : parsed.errors) {
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(ParseResourceAttributesTest, BadKeyEncodingIsReportedToo) {
  const ParsedResourceAttributes parsed = ParseResourceAttributes("k%G1=v");
  EXPECT_THAT(parsed.attributes, IsEmpty());
  EXPECT_THAT(parsed.errors, ElementsAre(HasSubstr("\"k%G1=v\"")));
}

// An environment of exactly `variables`.
std::function<std::optional<std::string>(const char*)> Environment(
    std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const char* name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

TEST(MakeResourceContextTest, HostAndVersionWithoutVariables) {
  const ResourceContext context = MakeResourceContext(Environment({}), "node-7", "1.2.3");
  EXPECT_EQ(context.host_name, "node-7");
  EXPECT_EQ(context.service_name, "");
  EXPECT_THAT(context.attributes, IsEmpty());
  EXPECT_EQ(context.scope_name, "ember");
  EXPECT_EQ(context.scope_version, "1.2.3");
}

TEST(MakeResourceContextTest, ServiceNameAndAttributesFromTheEnvironment) {
  testing::LogCapture log;
  const ResourceContext context = MakeResourceContext(
      Environment({{"OTEL_SERVICE_NAME", "checkout"},
                   {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,junk,team=a%20b"},
                   {"OTEL_SERVICE_NAMES", "not this one"}}),
      "node-7", "1.2.3");
  EXPECT_EQ(context.service_name, "checkout");
  EXPECT_THAT(context.attributes, ElementsAre(ResourceAttribute{"deployment.environment", "prod"},
                                              ResourceAttribute{"team", "a b"}));
  // The skipped entry is logged, one line naming it.
  ASSERT_EQ(log.lines().size(), 1u) << log.text();
  EXPECT_THAT(log.lines()[0], HasSubstr("\"junk\""));
}

}  // namespace
}  // namespace ember
