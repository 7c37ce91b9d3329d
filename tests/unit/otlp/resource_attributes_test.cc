// OTEL_RESOURCE_ATTRIBUTES parsing: pairs in order, blanks trimmed, percent-decoding of keys and
// values, and junk entries skipped with one error line each.
#include "otlp/resource_attributes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace ember
