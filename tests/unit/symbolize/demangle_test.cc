// Tests of Demangle().
#include "symbolize/demangle.h"

#include <gtest/gtest.h>

namespace ember {
namespace {

TEST(DemangleTest, DemanglesItaniumNames) {
  EXPECT_EQ(Demangle("_ZN13ember_fixture6Widget4SpinEi"), "ember_fixture::Widget::Spin(int)");
  EXPECT_EQ(Demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)");
  EXPECT_EQ(Demangle("_Z3foov.cold"), "foo() [clone .cold]");
}

TEST(DemangleTest, LeavesOtherNamesUnchanged) {
  EXPECT_EQ(Demangle("main"), "main");
  EXPECT_EQ(Demangle("f"), "f");  // a valid mangled <type> ("float") on its own
  EXPECT_EQ(Demangle(""), "");
  EXPECT_EQ(Demangle("_Z"), "_Z");
  EXPECT_EQ(Demangle("_Znot_really_mangled!"), "_Znot_really_mangled!");
}

}  // namespace
}  // namespace ember
