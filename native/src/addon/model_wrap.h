// The JS Model object: info(), step(plan), encodeImage(image) and encodeImages(images) → Promise (run on a worker thread;
// one of them in flight at a time), supplyMasks(stepId, masks) for a step's pending grammar masks, close(). Type conversion only; the work is in step/ and models/.
#pragma once
#include <napi.h>
#include <memory>
#include "addon/runtime.h"

namespace rapid {

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object NewInstance(Napi::Env env, std::shared_ptr<Runtime> rt);
  explicit ModelWrap(const Napi::CallbackInfo& info);

 private:
  Napi::Value Info(const Napi::CallbackInfo& info);
  Napi::Value Step(const Napi::CallbackInfo& info);
  Napi::Value SupplyMasks(const Napi::CallbackInfo& info);
  Napi::Value EncodeImage(const Napi::CallbackInfo& info);
  Napi::Value EncodeImages(const Napi::CallbackInfo& info);
  Napi::Value Encode(const Napi::CallbackInfo& info, bool many);
  Napi::Value Close(const Napi::CallbackInfo& info);
  std::shared_ptr<Runtime> rt_;  // null after close(); a running step keeps its own reference
};

}  // namespace rapid
