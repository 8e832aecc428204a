// The check harness the standalone native test binaries (kernels_test, moe_test, vision_test) share:
// CHECK counts passes and prints each failure with its file:line, throws_with matches an exception message.
#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

inline int g_fail = 0, g_pass = 0;

#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (cond) {                                                 \
      ++g_pass;                                                 \
    } else {                                                    \
      ++g_fail;                                                 \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
    }                                                           \
  } while (0)

// True when f throws a std::exception whose message contains needle (the message goes to *msg if given).
inline bool throws_with(const std::function<void()>& f, const std::string& needle, std::string* msg = nullptr) {
  try {
    f();
  } catch (const std::exception& e) {
    if (msg) *msg = e.what();
    if (std::string(e.what()).find(needle) != std::string::npos) return true;
    std::fprintf(stderr, "  (threw \"%s\", wanted \"%s\")\n", e.what(), needle.c_str());
    return false;
  }
  return false;
}

// An empty directory <system temp>/<name> (emptied first if it exists).
inline std::string fresh_tmpdir(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}
