// JS <-> C++ conversion of the step contract (NativeStepPlan / NativeStepResult in src/native/types.ts).
#pragma once
#include <napi.h>
#include <string>
#include <unordered_map>
#include <vector>
#include "step/plan.h"

namespace rapid {

// Throws Napi::TypeError naming the offending field (e.g. "rows[2].tokens must be an Int32Array").
StepPlan plan_from_js(const Napi::Value& v);

Napi::Object result_to_js(Napi::Env env, StepResult& r);

// A copy of `v` as a JS Float32Array (logits, hidden states, image embeddings).
Napi::Float32Array float32_array(Napi::Env env, const std::vector<float>& v);

// supplyMasks' [{ requestId, bitmask: Int32Array | null }] -> requestId -> words (null: empty).
std::unordered_map<std::string, std::vector<uint32_t>> masks_from_js(const Napi::Value& v);

}  // namespace rapid
