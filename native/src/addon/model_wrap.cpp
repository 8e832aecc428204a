#include "addon/model_wrap.h"
#include <chrono>
#include <cmath>
#include <stdexcept>
#include "addon/convert_plan.h"
#include "step/error_text.h"
#include "step/executor.h"

namespace rapid {

namespace {

// Runs execute_step off the event loop and settles the promise on the main thread.
class StepWorker : public Napi::AsyncWorker {
 public:
  StepWorker(Napi::Env env, std::shared_ptr<Runtime> rt, StepPlan plan, std::shared_ptr<MaskGate> gate)
      : Napi::AsyncWorker(env, "rapid.step"), rt_(std::move(rt)), plan_(std::move(plan)), gate_(std::move(gate)), deferred_(env) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      result_ = execute_step(*rt_->model, *rt_->kv, *rt_->pool, rt_->precision, plan_, gate_.get());
    } catch (...) {
      SetError("step failed: " + readable_current_error());
    }
    if (gate_) gate_->close();  // a supply after this (or after a timeout) is refused, never applied
  }
  void OnOK() override {
    release();
    deferred_.Resolve(result_to_js(Env(), result_));
  }
  void OnError(const Napi::Error& e) override {
    release();
    deferred_.Reject(e.Value());
  }

 private:
  void release() {
    if (gate_) {
      std::lock_guard<std::mutex> lock(rt_->gate_mutex);
      if (rt_->gate == gate_) rt_->gate.reset();
    }
    rt_->busy = false;
  }
  std::shared_ptr<Runtime> rt_;
  StepPlan plan_;
  std::shared_ptr<MaskGate> gate_;
  StepResult result_;
  Napi::Promise::Deferred deferred_;
};

// One image's pixels, copied off the JS heap (encoded on a worker thread), and its grid.
struct OwnedImage {
  std::vector<float> pixels;
  int grid[3] = {1, 1, 1};
};

// Runs the vision tower + projector off the event loop over one image or a batch (resolving to one
// embedding or an array of them, in order); shares the model's one in-flight slot.
class EncodeWorker : public Napi::AsyncWorker {
 public:
  EncodeWorker(Napi::Env env, std::shared_ptr<Runtime> rt, std::vector<OwnedImage> images, bool many)
      : Napi::AsyncWorker(env, "rapid.encodeImage"), rt_(std::move(rt)), images_(std::move(images)), many_(many),
        deferred_(env) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    std::vector<ImageInput> in(images_.size());
    for (size_t i = 0; i < images_.size(); ++i) {
      in[i].pixels = images_[i].pixels.data();
      in[i].n_values = int64_t(images_[i].pixels.size());
      in[i].grid_t = images_[i].grid[0];
      in[i].grid_h = images_[i].grid[1];
      in[i].grid_w = images_[i].grid[2];
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      out_ = rt_->model->encode_images(in, *rt_->pool, rt_->precision);
    } catch (const std::invalid_argument& e) {
      SetError("encodeImage: bad image input: " + readable_error(e));
    } catch (...) {
      SetError("encodeImage failed: " + readable_current_error());
    }
    ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  void OnOK() override {
    rt_->busy = false;
    Napi::Env env = Env();
    if (out_.size() != images_.size()) {
      deferred_.Reject(Napi::Error::New(env, "encodeImage: the encoder returned " + std::to_string(out_.size()) +
                                                 " embeddings for " + std::to_string(images_.size()) + " images")
                           .Value());
      return;
    }
    Napi::Array all = Napi::Array::New(env, out_.size());
    for (size_t i = 0; i < out_.size(); ++i) {
      const ImageEmbedding& e = out_[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("tokens", Napi::Number::New(env, double(e.tokens)));
      o.Set("embeddings", float32_array(env, e.embeddings));
      if (!e.deepstack.empty()) o.Set("deepstack", float32_array(env, e.deepstack));
      o.Set("ms", Napi::Number::New(env, ms_));  // the whole call's time: a batch is one forward
      all.Set(uint32_t(i), o);
    }
    if (many_) deferred_.Resolve(all);
    else deferred_.Resolve(all.Get(uint32_t(0)));
  }
  void OnError(const Napi::Error& e) override {
    rt_->busy = false;
    deferred_.Reject(e.Value());
  }

 private:
  std::shared_ptr<Runtime> rt_;
  std::vector<OwnedImage> images_;
  bool many_;
  std::vector<ImageEmbedding> out_;
  double ms_ = 0;
  Napi::Promise::Deferred deferred_;
};

// The constructor lives in the env's instance data, so the addon also works in worker threads.
struct AddonData {
  Napi::FunctionReference model_ctor;
};

}  // namespace

Napi::Function ModelWrap::Init(Napi::Env env) {
  Napi::Function f = DefineClass(env, "NativeModel",
                                 {InstanceMethod("info", &ModelWrap::Info), InstanceMethod("step", &ModelWrap::Step),
                                  InstanceMethod("supplyMasks", &ModelWrap::SupplyMasks),
                                  InstanceMethod("encodeImage", &ModelWrap::EncodeImage),
                                  InstanceMethod("encodeImages", &ModelWrap::EncodeImages),
                                  InstanceMethod("close", &ModelWrap::Close)});
  auto* data = new AddonData();
  data->model_ctor = Napi::Persistent(f);
  env.SetInstanceData(data);  // deleted by node-addon-api when the env is torn down
  return f;
}

Napi::Object ModelWrap::NewInstance(Napi::Env env, std::shared_ptr<Runtime> rt) {
  Napi::Object o = env.GetInstanceData<AddonData>()->model_ctor.New({});
  ModelWrap::Unwrap(o)->rt_ = std::move(rt);
  return o;
}

ModelWrap::ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {}

Napi::Value ModelWrap::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!rt_) throw Napi::Error::New(env, "model is closed");
  const ModelInfo& m = rt_->model->info();
  Napi::Object o = Napi::Object::New(env);
  o.Set("architecture", m.architecture);
  o.Set("family", m.family);
  o.Set("vocabSize", Napi::Number::New(env, double(m.vocab_size)));
  o.Set("hiddenSize", Napi::Number::New(env, double(m.hidden_size)));
  o.Set("numLayers", Napi::Number::New(env, m.num_layers));
  o.Set("contextLength", Napi::Number::New(env, double(m.context_length)));
  o.Set("blockSize", Napi::Number::New(env, rt_->kv->block_size()));
  o.Set("numBlocks", Napi::Number::New(env, rt_->kv->num_blocks()));
  o.Set("kvBytes", Napi::Number::New(env, double(rt_->kv->bytes())));
  o.Set("kvCacheDtype", kv_dtype_name(rt_->kv->dtype()));
  o.Set("weightBytes", Napi::Number::New(env, double(m.weight_bytes)));
  o.Set("quantization", m.quantization);
  o.Set("precision", rt_->precision == Precision::Exact ? "exact" : "fast");
  o.Set("threads", Napi::Number::New(env, rt_->pool->size()));
  o.Set("device", rt_->device);
  o.Set("deviceName", rt_->device_name);
  if (!rt_->device_note.empty()) o.Set("deviceNote", rt_->device_note);
  if (m.embedding_only) o.Set("embeddingOnly", Napi::Boolean::New(env, true));
  if (!m.mrope_sections.empty()) {
    Napi::Array a = Napi::Array::New(env, m.mrope_sections.size());
    for (size_t i = 0; i < m.mrope_sections.size(); ++i) a.Set(uint32_t(i), Napi::Number::New(env, m.mrope_sections[i]));
    o.Set("mropeSections", a);
  }
  if (const VisionEncoder* v = rt_->model->vision()) {
    Napi::Object vo = Napi::Object::New(env);
    vo.Set("family", v->family());
    vo.Set("deepstackLayers", Napi::Number::New(env, v->deepstack_layers()));
    vo.Set("weightBytes", Napi::Number::New(env, double(v->weight_bytes())));
    vo.Set("quantization", v->quantization());
    o.Set("vision", vo);
  }
  return o;
}

Napi::Value ModelWrap::Step(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto reject = [&](const std::string& msg) {
    Napi::Promise::Deferred d(env);
    d.Reject(Napi::Error::New(env, msg).Value());
    return d.Promise();
  };
  if (!rt_) return reject("model is closed");
  StepPlan plan;
  try {
    plan = plan_from_js(info[0]);
  } catch (const Napi::Error& e) {
    Napi::Promise::Deferred d(env);
    d.Reject(e.Value());
    return d.Promise();
  }
  bool expected = false;
  if (!rt_->busy.compare_exchange_strong(expected, true))
    return reject("a step or encodeImage is already in flight for this model; await it before calling step() again");
  std::shared_ptr<MaskGate> gate;
  if (plan.pending_masks) {
    gate = std::make_shared<MaskGate>(plan.mask_step_id, plan.mask_timeout_ms);
    std::lock_guard<std::mutex> lock(rt_->gate_mutex);
    rt_->gate = gate;
  }
  auto* w = new StepWorker(env, rt_, std::move(plan), std::move(gate));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::SupplyMasks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!rt_) throw Napi::Error::New(env, "model is closed");
  if (info.Length() < 2 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "supplyMasks expects (stepId, masks)");
  const double id = info[0].As<Napi::Number>().DoubleValue();
  auto masks = masks_from_js(info[1]);  // converted here: the worker thread must not touch JS values
  std::shared_ptr<MaskGate> gate;
  {
    std::lock_guard<std::mutex> lock(rt_->gate_mutex);
    gate = rt_->gate;
  }
  // Another step's id (a stale supply) or a step that stopped waiting: refused, never misapplied.
  const bool ok = gate && id >= 0 && double(gate->step_id()) == id && gate->supply(std::move(masks));
  return Napi::Boolean::New(env, ok);
}

Napi::Value ModelWrap::EncodeImage(const Napi::CallbackInfo& info) { return Encode(info, false); }

Napi::Value ModelWrap::EncodeImages(const Napi::CallbackInfo& info) { return Encode(info, true); }

// encodeImage({ pixels, grid }) and encodeImages([{ pixels, grid }, ...]): checked, copied, then one worker.
Napi::Value ModelWrap::Encode(const Napi::CallbackInfo& info, bool many) {
  Napi::Env env = info.Env();
  const std::string fn = many ? "encodeImages" : "encodeImage";
  auto reject = [&](const std::string& msg, bool type_error) {
    Napi::Promise::Deferred d(env);
    d.Reject(type_error ? Napi::TypeError::New(env, msg).Value() : Napi::Error::New(env, msg).Value());
    return d.Promise();
  };
  if (!rt_) return reject("model is closed", false);
  if (!rt_->model->vision())
    return reject(fn + ": this model (" + rt_->model->info().architecture + ") has no vision tower", false);
  std::vector<Napi::Value> values;
  if (!many) {
    if (info.Length() < 1 || !info[0].IsObject()) return reject("encodeImage expects { pixels, grid }", true);
    values.push_back(info[0]);
  } else {
    if (info.Length() < 1 || !info[0].IsArray() || info[0].As<Napi::Array>().Length() == 0)
      return reject("encodeImages expects a non-empty array of { pixels, grid }", true);
    Napi::Array a = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) values.push_back(a.Get(i));
  }
  std::vector<OwnedImage> images(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    const std::string which = many ? "images[" + std::to_string(k) + "]" : "image";
    if (!values[k].IsObject()) return reject(which + " must be { pixels, grid }", true);
    Napi::Object o = values[k].As<Napi::Object>();
    Napi::Value pv = o.Get("pixels");
    if (!pv.IsTypedArray() || pv.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
      return reject(which + ".pixels must be a Float32Array", true);
    Napi::Value gv = o.Get("grid");
    if (!gv.IsArray() || gv.As<Napi::Array>().Length() != 3) return reject(which + ".grid must be [t, h, w]", true);
    for (uint32_t i = 0; i < 3; ++i) {
      Napi::Value g = gv.As<Napi::Array>().Get(i);
      const double x = g.IsNumber() ? g.As<Napi::Number>().DoubleValue() : -1;
      if (!(x >= 1 && x <= 1e6) || std::floor(x) != x)
        return reject(which + ".grid entries must be positive integers", true);
      images[k].grid[i] = int(x);
    }
    Napi::Float32Array px = pv.As<Napi::Float32Array>();
    images[k].pixels.assign(px.Data(), px.Data() + px.ElementLength());
  }
  bool expected = false;
  if (!rt_->busy.compare_exchange_strong(expected, true))
    return reject("a step or encodeImage is already in flight for this model; await it first", false);
  auto* w = new EncodeWorker(env, rt_, std::move(images), many);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::Close(const Napi::CallbackInfo& info) {
  rt_.reset();  // a step in flight holds its own reference and frees the model when it settles
  return info.Env().Undefined();
}

}  // namespace rapid
