// Recursive-descent JSON parser and serializer for format/json.h.
#include "format/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rapid {
namespace {

[[noreturn]] void fail(const std::string& what, size_t pos) {
  throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos));
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Json document() {
    skip_ws();
    Json v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected trailing characters", i_);
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;  // guards the stack against hostile nesting

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }

  void expect_word(const char* w) {
    size_t n = std::strlen(w);
    if (s_.substr(i_, n) != w) fail(std::string("invalid literal, expected ") + w, i_);
    i_ += n;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep", i_);
    if (i_ >= s_.size()) fail("unexpected end of input", i_);
    char c = s_[i_];
    switch (c) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return Json(string());
      case 't': expect_word("true"); return Json(true);
      case 'f': expect_word("false"); return Json(false);
      case 'n': expect_word("null"); return Json();
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        fail(std::string("unexpected character '") + c + "'", i_);
    }
  }

  Json object(int depth) {
    ++i_;  // '{'
    Json::Object obj;
    skip_ws();
    if (peek() == '}') { ++i_; return Json(std::move(obj)); }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail("expected string key", i_);
      std::string key = string();  // duplicates are kept; find() returns the last, like Python
      skip_ws();
      if (peek() != ':') fail("expected ':'", i_);
      ++i_;
      skip_ws();
      obj.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      if (peek() == '}') { ++i_; break; }
      fail("expected ',' or '}'", i_);
    }
    return Json(std::move(obj));
  }

  Json array(int depth) {
    ++i_;  // '['
    Json::Array arr;
    skip_ws();
    if (peek() == ']') { ++i_; return Json(std::move(arr)); }
    for (;;) {
      skip_ws();
      arr.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      if (peek() == ']') { ++i_; break; }
      fail("expected ',' or ']'", i_);
    }
    return Json(std::move(arr));
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape", i_);
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else fail("invalid hex digit in \\u escape", i_ - 1);
    }
    return v;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    size_t start = i_;
    ++i_;  // '"'
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string", start);
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') { ++i_; break; }
      if (c < 0x20) fail("control character in string", i_);
      if (c != '\\') { out += char(c); ++i_; continue; }
      ++i_;
      if (i_ >= s_.size()) fail("unterminated escape", i_);
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xd800 && cp <= 0xdbff) {
            // High surrogate: must be followed by \uDC00-\uDFFF; a lone one becomes U+FFFD.
            if (i_ + 6 <= s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
              size_t save = i_;
              i_ += 2;
              uint32_t lo = hex4();
              if (lo >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
              } else {
                i_ = save;
                cp = 0xfffd;
              }
            } else {
              cp = 0xfffd;
            }
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            cp = 0xfffd;
          }
          put_utf8(out, cp);
          break;
        }
        default: fail(std::string("invalid escape \\") + e, i_ - 1);
      }
    }
    return out;
  }

  Json number() {
    size_t start = i_;
    bool integral = true;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++i_;
    } else {
      fail("invalid number", start);
    }
    if (peek() == '.') {
      integral = false;
      ++i_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number: digit expected after '.'", i_);
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number: digit expected in exponent", i_);
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    std::string tok(s_.substr(start, i_ - start));
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(tok.c_str(), &end, 10);
      if (errno == 0 && end == tok.c_str() + tok.size()) return Json(int64_t(v));
      // Too large for int64: fall through to double.
    }
    char* end = nullptr;
    double d = std::strtod(tok.c_str(), &end);
    return Json(d);
  }

  std::string_view s_;
  size_t i_ = 0;
};

const char* type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "bool";
    case Json::Type::Number: return "number";
    case Json::Type::String: return "string";
    case Json::Type::Array: return "array";
    case Json::Type::Object: return "object";
  }
  return "?";
}

[[noreturn]] void type_error(const char* want, Json::Type got) {
  throw std::runtime_error(std::string("JSON: expected ") + want + ", got " + type_name(got));
}

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

}  // namespace

Json Json::parse(std::string_view text) { return Parser(text).document(); }

bool Json::as_bool() const {
  if (type_ != Type::Bool) type_error("bool", type_);
  return b_;
}

int64_t Json::as_int() const {
  if (type_ != Type::Number) type_error("number", type_);
  if (is_int_) return int_;
  if (std::nearbyint(num_) != num_ || std::fabs(num_) > 9.2e18) type_error("integer", type_);
  return int64_t(num_);
}

double Json::as_double() const {
  if (type_ != Type::Number) type_error("number", type_);
  return is_int_ ? double(int_) : num_;
}

const std::string& Json::as_string() const {
  if (type_ != Type::String) type_error("string", type_);
  return str_;
}

const Json::Array& Json::array_items() const {
  if (type_ != Type::Array) type_error("array", type_);
  return arr_;
}

const Json::Object& Json::items() const {
  if (type_ != Type::Object) type_error("object", type_);
  return obj_;
}

Json::Array& Json::array_mut() {
  if (type_ != Type::Array) type_error("array", type_);
  return arr_;
}

Json::Object& Json::items_mut() {
  if (type_ != Type::Object) type_error("object", type_);
  return obj_;
}

size_t Json::size() const {
  if (type_ == Type::Array) return arr_.size();
  if (type_ == Type::Object) return obj_.size();
  return 0;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::Object) return nullptr;
  for (size_t i = obj_.size(); i-- > 0;)
    if (obj_[i].first == key) return &obj_[i].second;
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  if (type_ != Type::Object) type_error("object", type_);
  const Json* v = find(key);
  if (!v) throw std::runtime_error("JSON: missing key \"" + std::string(key) + "\"");
  return *v;
}

const Json& Json::at(size_t i) const {
  const Array& a = array_items();
  if (i >= a.size())
    throw std::runtime_error("JSON: index " + std::to_string(i) + " out of range (size " +
                             std::to_string(a.size()) + ")");
  return a[i];
}

int64_t Json::get_int(std::string_view key, int64_t def) const {
  const Json* v = find(key);
  return (v && !v->is_null()) ? v->as_int() : def;
}

double Json::get_double(std::string_view key, double def) const {
  const Json* v = find(key);
  return (v && !v->is_null()) ? v->as_double() : def;
}

bool Json::get_bool(std::string_view key, bool def) const {
  const Json* v = find(key);
  return (v && !v->is_null()) ? v->as_bool() : def;
}

std::string Json::get_string(std::string_view key, const std::string& def) const {
  const Json* v = find(key);
  return (v && !v->is_null()) ? v->as_string() : def;
}

Json& Json::set(std::string key, Json v) {
  if (type_ == Type::Null) type_ = Type::Object;
  if (type_ != Type::Object) type_error("object", type_);
  for (auto& kv : obj_)
    if (kv.first == key) { kv.second = std::move(v); return kv.second; }
  obj_.emplace_back(std::move(key), std::move(v));
  return obj_.back().second;
}

Json& Json::push(Json v) {
  if (type_ == Type::Null) type_ = Type::Array;
  if (type_ != Type::Array) type_error("array", type_);
  arr_.push_back(std::move(v));
  return arr_.back();
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  switch (type_) {
    case Type::Null: out += "null"; break;
    case Type::Bool: out += b_ ? "true" : "false"; break;
    case Type::Number: {
      if (is_int_) {
        out += std::to_string(int_);
      } else if (!std::isfinite(num_)) {
        out += "null";  // JSON has no inf/nan
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", num_);
        // Prefer the shortest representation that round-trips.
        for (int prec = 1; prec <= 17; ++prec) {
          char b2[32];
          std::snprintf(b2, sizeof b2, "%.*g", prec, num_);
          if (std::strtod(b2, nullptr) == num_) { std::memcpy(buf, b2, sizeof b2); break; }
        }
        std::string s(buf);
        if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
        out += s;
      }
      break;
    }
    case Type::String: dump_string(out, str_); break;
    case Type::Array: {
      out += '[';
      if (arr_.empty()) { out += ']'; break; }
      for (size_t i = 0; i < arr_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        arr_[i].dump_to(out, indent, depth + 1);
      }
      newline(depth);
      out += ']';
      break;
    }
    case Type::Object: {
      out += '{';
      if (obj_.empty()) { out += '}'; break; }
      for (size_t i = 0; i < obj_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        dump_string(out, obj_[i].first);
        out += indent < 0 ? ":" : ": ";
        obj_[i].second.dump_to(out, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      break;
    }
  }
}

}  // namespace rapid
