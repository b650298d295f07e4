// Entry point of native/tests: `--list` prints the case names, one per line;
// `NAME...` runs those cases; no argument runs all. Output per case:
// "ok NAME" or "not ok NAME: reason". Exit status 1 if any case failed.
#include <cstring>
#include <exception>
#include <iostream>
#include <vector>

#include "test_harness.h"

namespace {

bool RunCase(const std::string& name) {
  auto found = fg_test::Registry().find(name);
  if (found == fg_test::Registry().end()) {
    std::cout << "not ok " << name << ": no such case\n";
    return false;
  }
  try {
    found->second();
  } catch (const std::exception& failure) {
    std::cout << "not ok " << name << ": " << failure.what() << "\n";
    return false;
  }
  std::cout << "ok " << name << "\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& entry : fg_test::Registry()) std::cout << entry.first << "\n";
    return 0;
  }
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) names.emplace_back(argv[i]);
  if (names.empty()) {
    for (const auto& entry : fg_test::Registry()) names.push_back(entry.first);
  }
  bool allPassed = true;
  for (const auto& name : names) allPassed = RunCase(name) && allPassed;
  return allPassed ? 0 : 1;
}
