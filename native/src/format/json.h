// A small, strict JSON value + parser + serializer, enough for config.json, tokenizer configs,
// safetensors headers and index files. Objects keep insertion order (dump writes them back in order).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rapid {

class Json {
 public:
  enum class Type : uint8_t { Null, Bool, Number, String, Array, Object };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // insertion order (find: last wins)

  Json() = default;                          // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), b_(b) {}
  Json(int v) : type_(Type::Number), num_(v), is_int_(true), int_(v) {}
  Json(int64_t v) : type_(Type::Number), num_(double(v)), is_int_(true), int_(v) {}
  Json(uint64_t v) : type_(Type::Number), num_(double(v)), is_int_(true), int_(int64_t(v)) {}
  Json(double v) : type_(Type::Number), num_(v) {}
  Json(const char* s) : type_(Type::String), str_(s) {}
  Json(std::string s) : type_(Type::String), str_(std::move(s)) {}
  Json(std::string_view s) : type_(Type::String), str_(s) {}
  Json(Array a) : type_(Type::Array), arr_(std::move(a)) {}
  Json(Object o) : type_(Type::Object), obj_(std::move(o)) {}
  static Json make_array() { return Json(Array{}); }
  static Json make_object() { return Json(Object{}); }

  // Parses one JSON document (surrounding whitespace allowed, nothing else after it).
  // Throws std::runtime_error("JSON: <problem> at offset N").
  static Json parse(std::string_view text);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_int() const { return type_ == Type::Number && is_int_; }  // written without '.', 'e'
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed accessors; throw std::runtime_error("JSON: expected <type>") on a type mismatch.
  bool as_bool() const;
  int64_t as_int() const;      // integers, or doubles with an exact integer value
  double as_double() const;
  const std::string& as_string() const;
  const Array& array_items() const;
  const Array& array() const { return array_items(); }
  const Object& items() const;  // object members in order
  Array& array_mut();
  Object& items_mut();
  size_t size() const;          // array length / object member count, else 0

  // Object lookup: nullptr if not an object or key absent.
  const Json* find(std::string_view key) const;
  // Object lookup: throws std::runtime_error("JSON: missing key \"k\"").
  const Json& at(std::string_view key) const;
  // Array index: throws on out of range.
  const Json& at(size_t i) const;
  const Json& operator[](size_t i) const { return at(i); }

  // Convenience: member value or a default when absent or null.
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_double(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key, const std::string& def) const;

  // Builders.
  Json& set(std::string key, Json v);   // object: replace or append
  Json& push(Json v);                   // array: append

  // Serializes compactly (indent < 0) or pretty-printed with `indent` spaces.
  // Non-ASCII is written as UTF-8; control characters as \u00XX. Integers print exactly.
  std::string dump(int indent = -1) const;

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  Type type_ = Type::Null;
  bool b_ = false;
  double num_ = 0;
  bool is_int_ = false;
  int64_t int_ = 0;
  std::string str_;
  Array arr_;
  Object obj_;
};

}  // namespace rapid
