// Escaping for text that goes into the flame graph page: JSON inside a <script> element, and
// plain HTML text. Frame and process names come from the profiled programs, so treat them as
// hostile.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// Appends `s` as a quoted JSON string that is also safe inside an HTML <script> element: '<',
// '>', '&', U+2028/U+2029 and all control characters are \u-escaped (so "</script>" and "<!--"
// cannot end the element), and invalid UTF-8 bytes become U+FFFD so JSON.parse never fails.
void AppendJsonString(std::string* out, std::string_view s);

// Escapes & < > " ' for HTML text and attribute values; invalid UTF-8 becomes U+FFFD.
std::string HtmlEscape(std::string_view s);

}  // namespace ember
