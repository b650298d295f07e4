// Unit tests for native/errno_name.cc: the table against glibc's own
// strerrorname_np where the test binary has it (every number it names, the
// same name), and the fallback for numbers Linux does not name.
#include <cerrno>
#include <cstring>
#include <string>

#include "result.h"
#include "test_harness.h"

namespace {

TEST_CASE("errno names: the ones Node reports") {
  EXPECT_EQ(fg::ErrnoName(EPERM), std::string("EPERM"));
  EXPECT_EQ(fg::ErrnoName(ENODEV), std::string("ENODEV"));
  EXPECT_EQ(fg::ErrnoName(EWOULDBLOCK), std::string("EAGAIN"));
  EXPECT_EQ(fg::ErrnoName(ENOTSUP), std::string("EOPNOTSUPP"));
  EXPECT_EQ(fg::ErrnoName(0), std::string("E0"));
  EXPECT_EQ(fg::ErrnoName(4095), std::string("E4095"));
  EXPECT_EQ(fg::ErrnoName(-1), std::string("E-1"));
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
TEST_CASE("errno names: the same as glibc's strerrorname_np for every number it names") {
  int named = 0;
  for (int errnum = 1; errnum < 4096; ++errnum) {
    const char* glibc = strerrorname_np(errnum);
    if (glibc == nullptr) continue;
    ++named;
    EXPECT_EQ(fg::ErrnoName(errnum), std::string(glibc));
  }
  EXPECT_TRUE(named >= 130);
}
#endif

}  // namespace
