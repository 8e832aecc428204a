// The element type of the KV cache and the one place its default is chosen. 16-bit types halve the
// bytes per token; int8 stores one f16 scale per (token, KV head) next to the codes, so a slot is
// complete the moment it is written (blocks fill token by token) and no neighbour changes it.
#pragma once
#include <cstddef>
#include <string>

namespace rapid {

enum class KvDtype { F32, F16, BF16, I8 };

// "f32" | "f16" | "bf16" | "int8"; throws naming the accepted values otherwise.
KvDtype parse_kv_dtype(const std::string& s);
const char* kv_dtype_name(KvDtype t);

// Bytes of one stored element (the codes; int8's scales are counted by kv_scale_bytes).
size_t kv_elem_bytes(KvDtype t);
// Bytes of the per-(token, head) scale: 2 (an f16) for int8, 0 otherwise.
size_t kv_scale_bytes(KvDtype t);

// The default when the user names none (docs/kv-cache.md): f32 under exact precision (the parity mode); under fast
// precision the device's 16-bit choice (f16 on the CPU), made in kv_dtype.cpp only.
KvDtype default_kv_dtype(bool cuda, bool exact);

}  // namespace rapid
