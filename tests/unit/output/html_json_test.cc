// Escapers for the flame graph page: exact outputs for the characters that could break out of a
// <script> element, a JSON string or HTML text.
#include "output/html_json.h"

#include <string>

#include "gtest/gtest.h"

namespace ember {
namespace {

std::string Json(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

TEST(HtmlJsonTest, JsonString) {
  EXPECT_EQ(Json(""), R"("")");
  EXPECT_EQ(Json("plain::Name()"), "\"plain::Name()\"");
  EXPECT_EQ(Json("</script>"), R"("\u003c/script\u003e")");
  EXPECT_EQ(Json("<!--"), R"("\u003c!--")");
  EXPECT_EQ(Json("a\"b\\c'd&e"), R"("a\"b\\c\u0027d\u0026e")");
  EXPECT_EQ(Json("\n\t\r\x7f"), R"("\n\t\u000d\u007f")");
  EXPECT_EQ(Json(std::string_view("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(Json("\xE2\x80\xA8\xE2\x80\xA9"), R"("\u2028\u2029")");
  EXPECT_EQ(Json("\xC3\xA9\xF0\x9F\x94\xA5"), "\"\xC3\xA9\xF0\x9F\x94\xA5\"");
}

TEST(HtmlJsonTest, InvalidUtf8BecomesReplacementCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(Json("\xFF"), "\"" + fffd + "\"");
  EXPECT_EQ(Json("\xC3"), "\"" + fffd + "\"");                        // truncated sequence
  EXPECT_EQ(Json("\xC0\xAF"), "\"" + fffd + fffd + "\"");             // overlong '/'
  EXPECT_EQ(Json("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");  // surrogate
}

TEST(HtmlJsonTest, HtmlEscape) {
  EXPECT_EQ(HtmlEscape("<b>\"Tom\" & 'Jerry'</b>"),
            "&lt;b&gt;&quot;Tom&quot; &amp; &#39;Jerry&#39;&lt;/b&gt;");
  EXPECT_EQ(HtmlEscape("caf\xC3\xA9\xFF"), "caf\xC3\xA9\xEF\xBF\xBD");
}

}  // namespace
}  // namespace ember
