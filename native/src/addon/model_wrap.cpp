#include "addon/model_wrap.h"
#include "addon/convert_plan.h"
#include "step/executor.h"

namespace rapid {

namespace {

// Runs execute_step off the event loop and settles the promise on the main thread.
class StepWorker : public Napi::AsyncWorker {
 public:
  StepWorker(Napi::Env env, std::shared_ptr<Runtime> rt, StepPlan plan)
      : Napi::AsyncWorker(env, "rapid.step"), rt_(std::move(rt)), plan_(std::move(plan)), deferred_(env) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      result_ = execute_step(*rt_->model, *rt_->kv, *rt_->pool, rt_->precision, plan_);
    } catch (const std::exception& e) {
      SetError(std::string("step failed: ") + e.what());
    } catch (...) {
      SetError("step failed: unknown native exception");
    }
  }
  void OnOK() override {
    rt_->busy = false;
    deferred_.Resolve(result_to_js(Env(), result_));
  }
  void OnError(const Napi::Error& e) override {
    rt_->busy = false;
    deferred_.Reject(e.Value());
  }

 private:
  std::shared_ptr<Runtime> rt_;
  StepPlan plan_;
  StepResult result_;
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
  o.Set("weightBytes", Napi::Number::New(env, double(m.weight_bytes)));
  o.Set("quantization", m.quantization);
  o.Set("precision", rt_->precision == Precision::Exact ? "exact" : "fast");
  o.Set("threads", Napi::Number::New(env, rt_->pool->size()));
  if (!m.mrope_sections.empty()) {
    Napi::Array a = Napi::Array::New(env, m.mrope_sections.size());
    for (size_t i = 0; i < m.mrope_sections.size(); ++i) a.Set(uint32_t(i), Napi::Number::New(env, m.mrope_sections[i]));
    o.Set("mropeSections", a);
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
    return reject("a step is already in flight for this model; await it before calling step() again");
  auto* w = new StepWorker(env, rt_, std::move(plan));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::Close(const Napi::CallbackInfo& info) {
  rt_.reset();  // a step in flight holds its own reference and frees the model when it settles
  return info.Env().Undefined();
}

}  // namespace rapid
