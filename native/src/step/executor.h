// Runs one step: validates each row (a bad row gets an error, never a crash), concatenates all valid
// rows into one batch, runs ONE forward, computes logits only where needed, samples per row.
// No state survives a step except the KV contents the plan names.
#pragma once
#include "cpu/threadpool.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "step/mask_source.h"
#include "step/plan.h"

namespace rapid {

// Throws only when the whole step fails (e.g. the forward raised); row problems become row errors.
// Rows whose mask is pending get it from `masks` after the forward (written into the plan); with no
// source, or when it times out, only those rows fail.
StepResult execute_step(Model& model, KvPool& kv, ThreadPool& pool, Precision precision, StepPlan& plan,
                        MaskSource* masks = nullptr);

// "" if the row is well-formed for this model and pool, else the reason.
std::string validate_row(const StepRow& row, const ModelInfo& info, const KvPool& kv);

}  // namespace rapid
