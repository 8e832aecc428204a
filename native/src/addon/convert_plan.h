// JS <-> C++ conversion of the step contract (NativeStepPlan / NativeStepResult in src/native/types.ts).
#pragma once
#include <napi.h>
#include "step/plan.h"

namespace rapid {

// Throws Napi::TypeError naming the offending field (e.g. "rows[2].tokens must be an Int32Array").
StepPlan plan_from_js(const Napi::Value& v);

Napi::Object result_to_js(Napi::Env env, StepResult& r);

}  // namespace rapid
