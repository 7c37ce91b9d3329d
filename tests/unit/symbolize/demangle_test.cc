// Tests of Demangle(): C++ and Rust names, and the output budget.
#include "symbolize/demangle.h"

#include <gtest/gtest.h>

#include <string>

namespace ember {
namespace {

TEST(DemangleTest, DemanglesItaniumNames) {
  EXPECT_EQ(Demangle("_ZN13ember_fixture6Widget4SpinEi"), "ember_fixture::Widget::Spin(int)");
  EXPECT_EQ(Demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)");
  EXPECT_EQ(Demangle("_Z3foov.cold"), "foo() [clone .cold]");
  EXPECT_EQ(Demangle("_ZZ4mainENKUlvE_clEv"), "main::{lambda()#1}::operator()() const");
}

TEST(DemangleTest, LeavesOtherNamesUnchanged) {
  EXPECT_EQ(Demangle("main"), "main");
  EXPECT_EQ(Demangle("f"), "f");  // a valid mangled <type> ("float") on its own
  EXPECT_EQ(Demangle(""), "");
  EXPECT_EQ(Demangle("_Z"), "_Z");
  EXPECT_EQ(Demangle("_R"), "_R");
  EXPECT_EQ(Demangle("_Znot_really_mangled!"), "_Znot_really_mangled!");
  EXPECT_EQ(Demangle("_RNvXnot_rust"), "_RNvXnot_rust");
}

TEST(DemangleTest, DemanglesLegacyRustNamesWithoutTheHash) {
  EXPECT_EQ(Demangle("_ZN4burn6server16Handler$LT$T$GT$11rs_hot_leaf17h0123456789abcdefE"),
            "burn::server::Handler<T>::rs_hot_leaf");
  EXPECT_EQ(Demangle("_ZN3std2rt10lang_start17h5d2ad4c6e5a0b9f1E"), "std::rt::lang_start");
}

TEST(DemangleTest, DemanglesRustV0Names) {
  EXPECT_EQ(Demangle("_RNvCs15kBYyAo9fc_7mycrate7example"), "mycrate::example");
  EXPECT_EQ(Demangle("_RINvNtC3std3mem8align_ofjEB2_"), "std::mem::align_of::<usize>");
}

// f(void (*)(int), P1, ..., Pn) where each P is a pointer to a function of two of the one before:
// every parameter doubles the text through back-references. 22 of them: 237 bytes that demangle
// to 210 MB.
std::string DoublingBomb(int params) {
  std::string name = "_Z1fPFviE";
  auto substitution = [](int index) {  // S_, S0_, S1_, ..., base 36
    if (index == 0) return std::string("S_");
    std::string digits;
    for (int k = index - 1;; k /= 36) {
      digits.insert(digits.begin(), "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[k % 36]);
      if (k < 36) break;
    }
    return "S" + digits + "_";
  };
  for (int i = 0, last = 1; i < params; ++i, last += 2) {
    name += "PFv" + substitution(last) + substitution(last) + "E";
  }
  return name;
}

TEST(DemangleTest, BombStopsAtTheBudgetAndKeepsTheMangledName) {
  EXPECT_EQ(Demangle(DoublingBomb(1)), "f(void (*)(int), void (*)(void (*)(int), void (*)(int)))");
  const std::string bomb = DoublingBomb(22);
  ASSERT_EQ(bomb.size(), 237u);
  const uint64_t before = DemangleOverBudget();
  EXPECT_EQ(Demangle(bomb), bomb);
  EXPECT_EQ(DemangleOverBudget(), before + 1);
}

// f(A, A, ..., A): `count` parameters of the class named by `length` letters, through S_.
std::string RepeatedClass(size_t length, size_t count) {
  std::string name = "_Z1f" + std::to_string(length) + std::string(length, 'A');
  for (size_t i = 1; i < count; ++i) name += "S_";
  return name;
}

TEST(DemangleTest, NameOfExactlyTheBudgetIsKept) {
  // "f(" + 63 x 63 letters + 62 x ", " + ")": 4096 bytes.
  const std::string name = RepeatedClass(63, 63);
  const uint64_t before = DemangleOverBudget();
  const std::string demangled = Demangle(name);
  EXPECT_EQ(demangled.size(), kDemangleBudget);
  EXPECT_TRUE(demangled.starts_with("f(" + std::string(63, 'A') + ", "));
  EXPECT_TRUE(demangled.ends_with(std::string(63, 'A') + ")"));
  EXPECT_EQ(DemangleOverBudget(), before);
}

TEST(DemangleTest, NameOneByteOverTheBudgetStaysMangled) {
  // 64 x 62 letters + 63 x ", " + "f()": 4097 bytes.
  const std::string name = RepeatedClass(62, 64);
  const uint64_t before = DemangleOverBudget();
  EXPECT_EQ(Demangle(name), name);
  EXPECT_EQ(DemangleOverBudget(), before + 1);
  // The budget holds after it: the next name demangles whole.
  EXPECT_EQ(Demangle("_ZN13ember_fixture6Widget4SpinEi"), "ember_fixture::Widget::Spin(int)");
}

TEST(DemangleTest, SelfReferringRustBackReferenceStaysMangled) {
  // Within libiberty's recursion limit, which Demangle keeps: without it this name recursed until
  // the stack overflowed.
  const std::string name = "_RINtB_ZNpE3fo04_13honst_generic4implINtB_ZNpE3foo";
  EXPECT_EQ(Demangle(name), name);
}

TEST(DemangleTest, LongMangledNamesStayMangled) {
  // Over libiberty's 1 KiB bound of a mangled name, and over the budget.
  for (size_t length : {1100, 5000}) {
    const std::string name = "_Z" + std::to_string(length) + std::string(length, 'g') + "v";
    EXPECT_EQ(Demangle(name), name);
  }
}

}  // namespace
}  // namespace ember
