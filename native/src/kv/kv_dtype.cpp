#include "kv/kv_dtype.h"
#include <stdexcept>

namespace rapid {

KvDtype parse_kv_dtype(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "f16") return KvDtype::F16;
  if (s == "bf16") return KvDtype::BF16;
  if (s == "int8") return KvDtype::I8;
  throw std::invalid_argument("KV cache dtype must be 'f32', 'f16', 'bf16' or 'int8', got '" + s + "'");
}

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::F16: return "f16";
    case KvDtype::BF16: return "bf16";
    case KvDtype::I8: return "int8";
  }
  return "?";
}

size_t kv_elem_bytes(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return 4;
    case KvDtype::F16:
    case KvDtype::BF16: return 2;
    case KvDtype::I8: return 1;
  }
  return 4;
}

size_t kv_scale_bytes(KvDtype t) { return t == KvDtype::I8 ? 2 : 0; }

// Fast precision: 16 bits, half f32's bytes. CUDA takes bf16 (f32's range; widened by a shift), the CPU f16 (F16C
// converts it in one instruction).
KvDtype default_kv_dtype(bool cuda, bool exact) {
  if (exact) return KvDtype::F32;
  return cuda ? KvDtype::BF16 : KvDtype::F16;
}

}  // namespace rapid
