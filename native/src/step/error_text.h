// What a caught exception says, in words a user can act on: the standard library's own texts
// ("vector::_M_default_append", "std::bad_alloc") name its internals, not the problem.
#pragma once
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rapid {

inline std::string error_text(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return "out of memory: a buffer this step needs could not be allocated";
  if (dynamic_cast<const std::length_error*>(&e))
    return "a buffer this step needs is larger than this machine can allocate (" + std::string(e.what()) + ")";
  const std::string_view what = e.what();
  for (std::string_view lib : {"vector::", "basic_string", "std::", "map::", "unordered_map::", "array::"})
    if (what.substr(0, lib.size()) == lib) return "internal error in the native runtime (" + std::string(what) + ")";
  return std::string(what);
}

}  // namespace rapid
