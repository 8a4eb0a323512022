#include "reward/math_value.h"

#include <gtest/gtest.h>

namespace rlforge::reward {
namespace {

bool Same(const std::string& a, const std::string& b) {
  return MathEquivalent(ParseMathAnswer(a), ParseMathAnswer(b));
}

// The exact value num/den of an answer, which must parse exactly.
void ExpectExact(const std::string& text, int64_t num, int64_t den) {
  MathAnswer a = ParseMathAnswer(text);
  ASSERT_TRUE(a.is_number) << text;
  ASSERT_TRUE(a.value.exact) << text;
  EXPECT_EQ(static_cast<int64_t>(a.value.q.num), num) << text;
  EXPECT_EQ(static_cast<int64_t>(a.value.q.den), den) << text;
}

TEST(MathValueTest, ExactValues) {
  ExpectExact("1,234", 1234, 1);
  ExpectExact("1{,}234,567", 1234567, 1);
  ExpectExact("0.50", 1, 2);
  ExpectExact(".5", 1, 2);
  ExpectExact("-3/4", -3, 4);
  ExpectExact("\\frac{3}{4}", 3, 4);
  ExpectExact("\\dfrac{6}{8}", 3, 4);
  ExpectExact("\\tfrac12", 1, 2);
  ExpectExact("-\\frac{1}{3}", -1, 3);
  ExpectExact("\\frac{-2}{-4}", 1, 2);
  ExpectExact("\\sqrt{16}", 4, 1);
  ExpectExact("\\sqrt{\\frac{9}{4}}", 3, 2);
  ExpectExact("\\sqrt[3]{-27}", -3, 1);
  ExpectExact("2^{10}", 1024, 1);
  ExpectExact("2^{-2}", 1, 4);
  ExpectExact("\\left( 3 + 4 \\right) \\cdot 2", 14, 1);
  ExpectExact("3 \\times 4 - 2 \\div 4", 23, 2);
  ExpectExact("50\\%", 1, 2);
  ExpectExact("\\$12", 12, 1);
  ExpectExact("12 dollars", 12, 1);
  ExpectExact("12\\text{ cm}", 12, 1);
  ExpectExact("12cm^2", 12, 1);
  ExpectExact("90^\\circ", 90, 1);
  ExpectExact("90^{\\circ}", 90, 1);
  ExpectExact("x = 5", 5, 1);
  ExpectExact("\\text{12 apples}.", 12, 1);
  // 0.1 + 0.2 is exactly 0.3 here, unlike in floating point.
  ExpectExact("0.1 + 0.2", 3, 10);
  // Past 64 bits but within 128: still exact.
  ExpectExact("2^{62} \\cdot 4 / 2^{63}", 2, 1);
}

TEST(MathValueTest, NotNumbers) {
  for (const std::string t : {"2x", "x + 1", "(1,2)", "1,23", "Monday", "", "\\frac{1}{0}",
                              "\\sqrt{-4}", "5 - x", "1 2"}) {
    EXPECT_FALSE(ParseMathAnswer(t).is_number) << t;
  }
}

TEST(MathValueTest, IrrationalsAreApproximate) {
  MathAnswer a = ParseMathAnswer("2\\sqrt{2}");
  ASSERT_TRUE(a.is_number);
  EXPECT_FALSE(a.value.exact);
  EXPECT_NEAR(a.value.approx, 2.8284271247461903, 1e-15);
  EXPECT_TRUE(Same("2\\sqrt{2}", "\\sqrt{8}"));
  EXPECT_TRUE(Same("\\sqrt{2}", "1.414214"));
  EXPECT_FALSE(Same("\\sqrt{2}", "1.4142"));
  EXPECT_TRUE(Same("\\pi", "3.141593"));
}

TEST(MathValueTest, Equivalence) {
  EXPECT_TRUE(Same("0.5", "\\frac{1}{2}"));
  EXPECT_TRUE(Same("1234", "1,234"));
  EXPECT_TRUE(Same("-3", "-3.0"));
  EXPECT_FALSE(Same("3", "-3"));
  EXPECT_FALSE(Same("3/4", "4/3"));
  // A decimal is compared at 6 decimal places, as math-verify does.
  EXPECT_TRUE(Same("\\frac{1}{3}", "0.333333"));
  EXPECT_FALSE(Same("\\frac{1}{3}", "0.33"));
  EXPECT_FALSE(Same("\\frac{1}{3}", "0.3333"));
  // Without a decimal point, rationals are exact.
  EXPECT_FALSE(Same("\\frac{1}{3}", "\\frac{333333}{1000000}"));
  EXPECT_TRUE(Same("\\text{Monday}", "Monday"));
  EXPECT_FALSE(Same("Monday", "Tuesday"));
  EXPECT_FALSE(Same("5", "Five"));
}

TEST(MathValueTest, Percentages) {
  EXPECT_TRUE(Same("50\\%", "0.5"));
  EXPECT_TRUE(Same("50\\%", "50"));
  EXPECT_TRUE(Same("50", "50%"));
  EXPECT_TRUE(Same("12.5\\%", "0.125"));
  EXPECT_FALSE(Same("12.5\\%", "12.5"));  // the integer rule only
  EXPECT_FALSE(Same("50\\%", "5"));
  EXPECT_FALSE(Same("0.5", "50"));
}

TEST(MathValueTest, RoundsHalfToEvenAtSixPlaces) {
  EXPECT_TRUE(Same("0.0000005", "0"));  // 0.5e-6 -> 0
  EXPECT_TRUE(Same("0.0000015", "0.000002"));
  EXPECT_FALSE(Same("0.0000025", "0.000003"));
}

}  // namespace
}  // namespace rlforge::reward
