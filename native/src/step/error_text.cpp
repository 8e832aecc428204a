#include "step/error_text.h"

#include <typeinfo>

#include <new>
#include <stdexcept>
#include <string_view>

namespace rapid {
namespace {

// libstdc++ messages name internals ("vector::_M_default_append", "basic_string::_M_create", "stoi").
bool is_library_text(std::string_view what) {
  for (std::string_view p : {"::", "_M_", "std::", "stoi", "stol", "stod", "bad_", "__n"})
    if (what.find(p) != std::string_view::npos) return true;
  return what.empty();
}

}  // namespace

std::string readable_error(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "the model needs more memory than is available (an allocation failed; check config.json sizes and the "
           "KV cache size)";
  const std::string what = e.what();
  if (!is_library_text(what)) return what;
  if (dynamic_cast<const std::length_error*>(&e))
    return "invalid size: a config.json value or tensor shape asks for an impossible allocation";
  if (dynamic_cast<const std::out_of_range*>(&e))
    return "invalid index: a config.json value or tensor shape points outside the data";
  if (dynamic_cast<const std::invalid_argument*>(&e)) return "invalid number in config.json or a checkpoint header";
  return "internal error in the native runtime (" + std::string(typeid(e).name()) + ")";
}

std::string readable_current_error() {
  try {
    throw;
  } catch (const std::exception& e) {
    return readable_error(e);
  } catch (...) {
    return "unknown native exception";
  }
}

}  // namespace rapid
