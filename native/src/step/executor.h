// Runs one step: validates each row (a bad row gets an error, never a crash), concatenates all valid
// rows into one batch, runs ONE forward, computes logits only where needed, samples per row.
// No state survives a step except the KV contents the plan names.
#pragma once
#include "cpu/threadpool.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "step/plan.h"

namespace rapid {

// Throws only when the whole step fails (e.g. the forward raised); row problems become row errors.
StepResult execute_step(Model& model, KvPool& kv, ThreadPool& pool, Precision precision, const StepPlan& plan);

// "" if the row is well-formed for this model and pool, else the reason.
std::string validate_row(const StepRow& row, const ModelInfo& info, const KvPool& kv);

}  // namespace rapid
