// Module entry: loadModel, inspectCheckpoint, convert, systemInfo, memoryBandwidth, architectures,
// version, abi.
// Type conversion only; C++ exceptions surface as JS errors with their message intact.
#include <napi.h>
#include <thread>
#include "addon/model_wrap.h"
#include "step/error_text.h"
#include "addon/runtime.h"
#include "backend/device.h"
#include "cpu/matmul.h"
#include "cpu/matmul_parts.h"
#include "format/safetensors.h"
#include "models/registry.h"
#include "quant/quantize.h"

namespace rapid {
namespace {

constexpr int kAbi = 6;  // must equal NATIVE_ABI in src/native/binding.ts
constexpr const char* kVersion = "0.1.0";

std::string str_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsString())
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

// Runs fn, turning any C++ exception into a JS Error with a readable message (never an abort).
template <typename F>
auto guarded(Napi::Env env, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Napi::Error&) {
    throw;
  } catch (...) {
    throw Napi::Error::New(env, readable_current_error());
  }
}

Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string dir = str_arg(info, 0, "dir");
  LoadOptions o;
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object opts = info[1].As<Napi::Object>();
    // A count: a whole number at least `min` (undefined keeps the default). A negative KV budget used to fall back to
    // the default share silently (a JS `2 << 30` overflows to -2^31): say so instead.
    auto count = [&](const char* k, double def, double min) {
      Napi::Value given = opts.Get(k);
      if (given.IsUndefined()) return def;
      if (!given.IsNumber()) throw Napi::TypeError::New(env, std::string("options.") + k + " must be a number");
      const double v = given.As<Napi::Number>().DoubleValue();
      constexpr double kMaxSafe = 9007199254740991.0;  // Number.MAX_SAFE_INTEGER: beyond it, not a count
      if (!(v >= min && v <= kMaxSafe && v == double(int64_t(v))))  // NaN fails the first test, before the cast
        throw Napi::RangeError::New(env, std::string("options.") + k + " must be a whole number of at least " +
                                             std::to_string(int64_t(min)) + ", got " + given.ToString().Utf8Value());
      return v;
    };
    o.threads = int(count("threads", 0, 0));
    o.kv_bytes = int64_t(count("kvCacheBytes", 0, 1));
    o.block_size = int(count("blockSize", 16, 1));
    Napi::Value dv = opts.Get("device");
    if (!dv.IsUndefined()) {
      if (!dv.IsString()) throw Napi::TypeError::New(env, "options.device must be 'auto', 'cpu' or 'cuda'");
      o.device = guarded(env, [&] { return parse_device(dv.As<Napi::String>().Utf8Value()); });
    }
    Napi::Value kd = opts.Get("kvCacheDtype");
    if (!kd.IsUndefined()) {
      if (!kd.IsString()) throw Napi::TypeError::New(env, "options.kvCacheDtype must be 'f32', 'f16', 'bf16' or 'int8'");
      o.kv_dtype = guarded(env, [&] { return parse_kv_dtype(kd.As<Napi::String>().Utf8Value()); });
    }
    Napi::Value p = opts.Get("precision");
    if (!p.IsUndefined()) {
      const std::string ps = p.IsString() ? p.As<Napi::String>().Utf8Value() : "";
      if (ps == "exact") o.precision = Precision::Exact;
      else if (ps == "fast") o.precision = Precision::Fast;
      else throw Napi::TypeError::New(env, "options.precision must be 'exact' or 'fast'");
    }
  }
  std::shared_ptr<Runtime> rt = guarded(env, [&] { return load_runtime(dir, o); });
  return ModelWrap::NewInstance(env, std::move(rt));
}

Napi::Value InspectCheckpoint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string dir = str_arg(info, 0, "dir");
  std::unique_ptr<Checkpoint> ck = guarded(env, [&] { return Checkpoint::open(dir); });
  const auto& ts = ck->tensors();
  Napi::Array out = Napi::Array::New(env, ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", ts[i].name);
    o.Set("dtype", dtype_name(ts[i].dtype));
    Napi::Array shape = Napi::Array::New(env, ts[i].shape.size());
    for (size_t d = 0; d < ts[i].shape.size(); ++d) shape.Set(uint32_t(d), Napi::Number::New(env, double(ts[i].shape[d])));
    o.Set("shape", shape);
    o.Set("file", ts[i].file);
    out.Set(uint32_t(i), o);
  }
  return out;
}

Napi::Value Convert(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string src = str_arg(info, 0, "src"), dst = str_arg(info, 1, "dst");
  if (info.Length() < 3 || !info[2].IsObject()) throw Napi::TypeError::New(env, "options must be { bits, groupSize }");
  Napi::Object o = info[2].As<Napi::Object>();
  if (!o.Get("bits").IsNumber() || !o.Get("groupSize").IsNumber())
    throw Napi::TypeError::New(env, "options.bits and options.groupSize must be numbers");
  const int bits = o.Get("bits").As<Napi::Number>().Int32Value();
  const int group = o.Get("groupSize").As<Napi::Number>().Int32Value();
  guarded(env, [&] { convert_checkpoint(src, dst, bits, group); return 0; });
  return env.Undefined();
}

Napi::Value SystemInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  const std::vector<std::string> f = cpu_simd_features();
  Napi::Array simd = Napi::Array::New(env, f.size());
  for (size_t i = 0; i < f.size(); ++i) simd.Set(uint32_t(i), f[i]);
  o.Set("simd", simd);
  o.Set("kernel", matmul_kernel_name());
  o.Set("decodeKernels", decode_matmul_description());
  o.Set("threads", Napi::Number::New(env, ThreadPool::hardware_threads()));
  const CudaStatus cs = cuda_status();
  Napi::Object c = Napi::Object::New(env);
  c.Set("compiled", cs.compiled);
  Napi::Array devs = Napi::Array::New(env, cs.devices.size());
  for (size_t i = 0; i < cs.devices.size(); ++i) {
    const GpuInfo& g = cs.devices[i];
    Napi::Object d = Napi::Object::New(env);
    d.Set("index", Napi::Number::New(env, g.index));
    d.Set("name", g.name);
    d.Set("totalBytes", Napi::Number::New(env, double(g.total_bytes)));
    d.Set("freeBytes", Napi::Number::New(env, double(g.free_bytes)));
    d.Set("computeCapability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor));
    devs.Set(uint32_t(i), d);
  }
  c.Set("devices", devs);
  if (!cs.driver_version.empty()) c.Set("driverVersion", cs.driver_version);
  if (!cs.runtime_version.empty()) c.Set("runtimeVersion", cs.runtime_version);
  if (!cs.error.empty()) c.Set("error", cs.error);
  o.Set("cuda", c);
  return o;
}

Napi::Value MemoryBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber())
    throw Napi::TypeError::New(env, "memoryBandwidth(bytes: number, threads: number)");
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  const int threads = info[1].As<Napi::Number>().Int32Value();
  if (!(bytes >= 1 << 20)) throw Napi::RangeError::New(env, "bytes must be at least 1 MiB");
  return Napi::Number::New(env, guarded(env, [&] {
    ThreadPool pool(threads > 0 ? threads : ThreadPool::hardware_threads());
    return measure_read_bandwidth(pool, size_t(bytes));
  }));
}

// config.json architectures the registry loads, in registry order: TS checks a download against it.
Napi::Value Architectures(const Napi::CallbackInfo& info) {
  const std::vector<std::string> names = supported_architectures();
  Napi::Array out = Napi::Array::New(info.Env(), names.size());  // string [n_architectures]
  for (size_t i = 0; i < names.size(); ++i) out.Set(uint32_t(i), names[i]);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abi", Napi::Number::New(env, kAbi));
  exports.Set("version", Napi::String::New(env, kVersion));
  exports.Set("loadModel", Napi::Function::New(env, LoadModel, "loadModel"));
  exports.Set("inspectCheckpoint", Napi::Function::New(env, InspectCheckpoint, "inspectCheckpoint"));
  exports.Set("convert", Napi::Function::New(env, Convert, "convert"));
  exports.Set("systemInfo", Napi::Function::New(env, SystemInfo, "systemInfo"));
  exports.Set("memoryBandwidth", Napi::Function::New(env, MemoryBandwidth, "memoryBandwidth"));
  exports.Set("architectures", Napi::Function::New(env, Architectures, "architectures"));
  ModelWrap::Init(env);
  return exports;
}

}  // namespace
}  // namespace rapid

static Napi::Object InitRapidNative(Napi::Env env, Napi::Object exports) { return rapid::Init(env, exports); }

NODE_API_MODULE(rapid_native, InitRapidNative)
