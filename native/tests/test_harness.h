// A deliberately small unit-test harness for the pure native code.
// The mocha suite runs the binary with --list, then runs each case by name,
// so every C++ case is reported (and counted) as a mocha test.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fg_test {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::map<std::string, std::function<void()>>& Registry() {
  static std::map<std::string, std::function<void()>> cases;
  return cases;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> body) {
    Registry().emplace(name, std::move(body));
  }
};

template <typename A, typename B>
void ExpectEqual(const A& actual, const B& expected, const char* actualText,
                 const char* expectedText, const char* file, int line) {
  if (!(actual == expected)) {
    std::ostringstream out;
    out << file << ":" << line << ": expected " << actualText << " == " << expectedText;
    if constexpr (std::is_arithmetic_v<A> && std::is_arithmetic_v<B>) {
      out << " (got " << +actual << " vs " << +expected << ")";
    } else if constexpr (std::is_convertible_v<A, std::string> &&
                         std::is_convertible_v<B, std::string>) {
      out << " (got \"" << std::string(actual) << "\" vs \"" << std::string(expected) << "\")";
    }
    throw Failure(out.str());
  }
}

}  // namespace fg_test

#define FG_CONCAT_INNER(a, b) a##b
#define FG_CONCAT(a, b) FG_CONCAT_INNER(a, b)

#define TEST_CASE(name)                                             \
  static void FG_CONCAT(test_body_, __LINE__)();                    \
  static ::fg_test::Registrar FG_CONCAT(test_registrar_, __LINE__)( \
      name, &FG_CONCAT(test_body_, __LINE__));                      \
  static void FG_CONCAT(test_body_, __LINE__)()

#define EXPECT_EQ(actual, expected) \
  ::fg_test::ExpectEqual((actual), (expected), #actual, #expected, __FILE__, __LINE__)

#define EXPECT_TRUE(condition)                                                          \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      throw ::fg_test::Failure(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": expected true: " #condition);                         \
    }                                                                                   \
  } while (0)

#define EXPECT_FALSE(condition) EXPECT_TRUE(!(condition))
