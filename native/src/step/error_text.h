// A C++ exception as a message a user can act on: the runtime's own errors keep their text (they name the
// field or tensor); the standard library's allocation, size and index errors become a sentence instead of
// "std::bad_alloc" or "vector::_M_default_append".
#pragma once
#include <exception>
#include <string>

namespace rapid {

std::string readable_error(const std::exception& e);

// For catch (...): the current exception, whatever it is, as readable text.
std::string readable_current_error();

}  // namespace rapid
