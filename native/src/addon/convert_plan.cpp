#include "addon/convert_plan.h"
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace rapid {

namespace {

// A malformed value: inside a row it fails that row alone (StepRow::error); elsewhere the whole call (TypeError).
struct BadField : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// 2^53: integers a JS number holds exactly (seeds, counters, ids).
constexpr double kExactInts = 9007199254740992.0;

bool is_int_in(double v, double lo, double hi) { return v >= lo && v <= hi && std::floor(v) == v; }

// double -> float without the undefined behaviour of converting an out-of-range value: beyond float's range is
// infinite (NaN stays NaN), which validate_sample_params then refuses for this row.
float f32(double v) {
  if (v > double(std::numeric_limits<float>::max())) return std::numeric_limits<float>::infinity();
  if (v < -double(std::numeric_limits<float>::max())) return -std::numeric_limits<float>::infinity();
  return float(v);
}

// A property name, created once per conversion: a lookup by C string creates the JS string anew each time, and a
// plan looks some 25 names up per row (64 rows: most of a decode step's host time, before this).
struct Key {
  Napi::String js;
  const char* name;
  Key(Napi::Env env, const char* n) : js(Napi::String::New(env, n)), name(n) {}
};

// Where a value sits, spelled out only for an error message ("rows[3].sample"), not for every valid row.
struct Where {
  const char* base;       // "rows", "masks", or a whole path ("plan.pendingMasks")
  int64_t index = -1;     // base[index] when >= 0
  const char* sub = nullptr;  // then ".sub"
  // Appends only (GCC 12 reports a false -Wrestrict on "a" + std::string).
  std::string str() const {
    std::string s(base);
    if (index >= 0) {
      s += '[';
      s += std::to_string(index);
      s += ']';
    }
    if (sub) {
      s += '.';
      s += sub;
    }
    return s;
  }
  std::string operator+(const char* rest) const { return str().append(rest); }
  std::string at(const Key& k, const char* rest) const { return str().append(".").append(k.name).append(rest); }
};

// The names a plan uses.
struct Keys {
  Key rows, request_id, tokens, positions, block_table, context_len, sample, want_logits, want_hidden, draft, embeds, offsets, data,
      deepstack, bidirectional, temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
      frequency_penalty, seed, counter, logprobs, prompt_tokens, output_tokens, bitmask, logit_bias, values,
      pending_masks, step_id, timeout_ms;
  explicit Keys(Napi::Env e)
      : rows(e, "rows"), request_id(e, "requestId"), tokens(e, "tokens"), positions(e, "positions"),
        block_table(e, "blockTable"), context_len(e, "contextLen"), sample(e, "sample"), want_logits(e, "wantLogits"),
        want_hidden(e, "wantHidden"), draft(e, "draft"),
        embeds(e, "embeds"), offsets(e, "offsets"), data(e, "data"), deepstack(e, "deepstack"),
        bidirectional(e, "bidirectional"), temperature(e, "temperature"), top_p(e, "topP"), top_k(e, "topK"),
        min_p(e, "minP"), repetition_penalty(e, "repetitionPenalty"), presence_penalty(e, "presencePenalty"),
        frequency_penalty(e, "frequencyPenalty"), seed(e, "seed"), counter(e, "counter"), logprobs(e, "logprobs"),
        prompt_tokens(e, "promptTokens"), output_tokens(e, "outputTokens"), bitmask(e, "bitmask"),
        logit_bias(e, "logitBias"), values(e, "values"), pending_masks(e, "pendingMasks"), step_id(e, "stepId"), timeout_ms(e, "timeoutMs") {}
};

std::vector<int32_t> int32s(const Napi::Object& o, const Key& key, const Where& where, bool required) {
  Napi::Value v = o.Get(key.js);
  if (v.IsUndefined() && !required) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    throw BadField(where.at(key, " must be an Int32Array"));
  Napi::Int32Array a = v.As<Napi::Int32Array>();
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

std::vector<float> floats(const Napi::Object& o, const Key& key, const Where& where, bool required) {
  Napi::Value v = o.Get(key.js);
  if (v.IsUndefined() && !required) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw BadField(where.at(key, " must be a Float32Array"));
  Napi::Float32Array a = v.As<Napi::Float32Array>();
  return std::vector<float>(a.Data(), a.Data() + a.ElementLength());
}

double number(const Napi::Object& o, const Key& key, const Where& where, double def, bool required) {
  Napi::Value v = o.Get(key.js);
  if (v.IsUndefined()) {
    if (required) throw BadField(where.at(key, " is required"));
    return def;
  }
  if (!v.IsNumber()) throw BadField(where.at(key, " must be a number"));
  return v.As<Napi::Number>().DoubleValue();
}

SampleParams sample_from_js(const Napi::Object& s, const Keys& k, const Where& where, bool& mask_pending) {
  SampleParams p;
  p.temperature = f32(number(s, k.temperature, where, 0, false));
  p.top_p = f32(number(s, k.top_p, where, 1, false));
  const double top_k = number(s, k.top_k, where, 0, false);
  if (!is_int_in(top_k, 0, 2147483647.0)) throw BadField(where + ".topK must be an integer in [0, 2147483647] (0: off)");
  p.top_k = int(top_k);
  p.min_p = f32(number(s, k.min_p, where, 0, false));
  p.repetition_penalty = f32(number(s, k.repetition_penalty, where, 1, false));
  p.presence_penalty = f32(number(s, k.presence_penalty, where, 0, false));
  p.frequency_penalty = f32(number(s, k.frequency_penalty, where, 0, false));
  const double seed = number(s, k.seed, where, 0, false), counter = number(s, k.counter, where, 0, false);
  if (!is_int_in(seed, 0, kExactInts - 1)) throw BadField(where + ".seed must be an integer in [0, 2^53)");
  if (!is_int_in(counter, 0, kExactInts - 1)) throw BadField(where + ".counter must be an integer in [0, 2^53)");
  p.seed = uint64_t(seed);
  p.counter = uint64_t(counter);
  const double lp = number(s, k.logprobs, where, -1, false);
  if (!is_int_in(lp, -1, 1e6)) throw BadField(where + ".logprobs must be an integer in [-1, 1000000] (-1: none)");
  p.logprobs = int(lp);
  p.prompt_tokens = int32s(s, k.prompt_tokens, where, false);
  p.output_tokens = int32s(s, k.output_tokens, where, false);
  // Sparse { tokens, values }; ids and values are checked by validate_sample_params.
  Napi::Value lb = s.Get(k.logit_bias.js);
  if (!lb.IsUndefined() && !lb.IsNull()) {
    if (!lb.IsObject()) throw BadField(where.at(k.logit_bias, " must be an object { tokens, values }"));
    const Napi::Object o = lb.As<Napi::Object>();
    const Where bw{"rows", where.index, "sample.logitBias"};
    const std::vector<int32_t> tokens = int32s(o, k.tokens, bw, true);
    const std::vector<float> values = floats(o, k.values, bw, true);
    if (tokens.size() != values.size()) throw BadField(bw + " tokens and values must have the same length");
    p.logit_bias.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) p.logit_bias[i] = {tokens[i], values[i]};
  }
  // 'pending': the mask arrives after the forward (ModelWrap::SupplyMasks).
  Napi::Value bm = s.Get(k.bitmask.js);
  mask_pending = bm.IsString() && bm.As<Napi::String>().Utf8Value() == "pending";
  if (mask_pending) return p;
  std::vector<int32_t> mask = int32s(s, k.bitmask, where, false);
  p.bitmask.resize(mask.size());
  if (!mask.empty()) std::memcpy(p.bitmask.data(), mask.data(), mask.size() * sizeof(int32_t));
  return p;
}

// Everything of a row after its requestId; throws BadField for the row's first malformed value.
void row_from_js(const Napi::Object& r, const Keys& k, uint32_t i, StepRow& row) {
  const Where where{"rows", int64_t(i)};
  row.tokens = int32s(r, k.tokens, where, true);
  row.positions = int32s(r, k.positions, where, true);
  row.block_table = int32s(r, k.block_table, where, true);
  const double ctx = number(r, k.context_len, where, 0, true);
  if (!is_int_in(ctx, 0, kExactInts - 1)) throw BadField(where + ".contextLen must be an integer in [0, 2^53)");
  row.context_len = int64_t(ctx);
  Napi::Value s = r.Get(k.sample.js);
  if (!s.IsUndefined() && !s.IsNull()) {
    if (!s.IsObject()) throw BadField(where + ".sample must be an object");
    row.sample = sample_from_js(s.As<Napi::Object>(), k, Where{"rows", int64_t(i), "sample"}, row.mask_pending);
    row.has_sample = true;
  }
  Napi::Value wl = r.Get(k.want_logits.js);
  row.want_logits = wl.IsBoolean() && wl.As<Napi::Boolean>().Value();
  const double draft = number(r, k.draft, where, 0, false);
  if (!is_int_in(draft, 0, 1e6)) throw BadField(where + ".draft must be an integer in [0, 1000000]");
  row.draft = int64_t(draft);
  Napi::Value wh = r.Get(k.want_hidden.js);
  row.want_hidden = wh.IsBoolean() && wh.As<Napi::Boolean>().Value();
  // Copies: the step runs on a worker thread after this call returns.
  Napi::Value em = r.Get(k.embeds.js);
  if (!em.IsUndefined() && !em.IsNull()) {
    if (!em.IsObject()) throw BadField(where + ".embeds must be an object");
    Napi::Object eo = em.As<Napi::Object>();
    const Where ew{"rows", int64_t(i), "embeds"};
    row.has_embeds = true;
    row.embed_offsets = int32s(eo, k.offsets, ew, true);
    row.embed_data = floats(eo, k.data, ew, true);
    row.embed_deepstack = floats(eo, k.deepstack, ew, false);
  }
  row.bidirectional = int32s(r, k.bidirectional, where, false);
}

}  // namespace

StepPlan plan_from_js(const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!v.IsObject()) throw Napi::TypeError::New(env, "step plan must be an object { rows: [...] }");
  const Keys k(env);
  Napi::Value rowsv = v.As<Napi::Object>().Get(k.rows.js);
  if (!rowsv.IsArray()) throw Napi::TypeError::New(env, "plan.rows must be an array");
  Napi::Array rows = rowsv.As<Napi::Array>();
  StepPlan plan;
  plan.rows.resize(rows.Length());
  for (uint32_t i = 0; i < rows.Length(); ++i) {
    const Where where{"rows", int64_t(i)};
    Napi::Value rv = rows.Get(i);
    // A row without an id cannot be answered on its own: the plan itself is malformed.
    if (!rv.IsObject()) throw Napi::TypeError::New(env, where + " must be an object");
    Napi::Object r = rv.As<Napi::Object>();
    StepRow& row = plan.rows[i];
    Napi::Value id = r.Get(k.request_id.js);
    if (!id.IsString()) throw Napi::TypeError::New(env, where + ".requestId must be a string");
    row.request_id = id.As<Napi::String>().Utf8Value();
    try {
      row_from_js(r, k, i, row);
    } catch (const BadField& e) {
      // This row fails alone (execute_step reports it); the rest of the step runs.
      row = StepRow{};
      row.request_id = id.As<Napi::String>().Utf8Value();
      row.error = e.what();
      continue;
    }
    plan.pending_masks |= row.mask_pending;
  }
  Napi::Value pm = v.As<Napi::Object>().Get(k.pending_masks.js);
  if (plan.pending_masks) {
    if (!pm.IsObject())
      throw Napi::TypeError::New(env, "plan.pendingMasks { stepId, timeoutMs } is required when a row's bitmask is 'pending'");
    Napi::Object o = pm.As<Napi::Object>();
    const Where pw{"plan.pendingMasks"};
    double id = 0, ms = 0;
    try {
      id = number(o, k.step_id, pw, 0, true);
      ms = number(o, k.timeout_ms, pw, 0, true);
    } catch (const BadField& e) {
      throw Napi::TypeError::New(env, e.what());
    }
    if (!is_int_in(id, 0, kExactInts - 1)) throw Napi::TypeError::New(env, "plan.pendingMasks.stepId must be an integer in [0, 2^53)");
    if (!(ms > 0 && ms <= 3.6e6)) throw Napi::TypeError::New(env, "plan.pendingMasks.timeoutMs must be in (0, 3600000]");
    plan.mask_step_id = uint64_t(id);
    plan.mask_timeout_ms = ms;
  }
  return plan;
}

std::unordered_map<std::string, std::vector<uint32_t>> masks_from_js(const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!v.IsArray()) throw Napi::TypeError::New(env, "masks must be an array of { requestId, bitmask }");
  Napi::Array a = v.As<Napi::Array>();
  const Key request_id(env, "requestId"), bitmask(env, "bitmask");
  std::unordered_map<std::string, std::vector<uint32_t>> out;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    const Where where{"masks", int64_t(i)};
    Napi::Value e = a.Get(i);
    if (!e.IsObject()) throw Napi::TypeError::New(env, where + " must be an object");
    Napi::Object o = e.As<Napi::Object>();
    Napi::Value id = o.Get(request_id.js);
    if (!id.IsString()) throw Napi::TypeError::New(env, where + ".requestId must be a string");
    std::vector<uint32_t> words;
    if (!o.Get(bitmask.js).IsNull()) {
      std::vector<int32_t> m;
      try {
        m = int32s(o, bitmask, where, true);
      } catch (const BadField& e) {
        throw Napi::TypeError::New(env, e.what());
      }
      if (m.empty()) throw Napi::TypeError::New(env, where + ".bitmask is empty (use null to withhold a row's mask)");
      words.resize(m.size());
      std::memcpy(words.data(), m.data(), m.size() * sizeof(int32_t));
    }
    if (!out.emplace(id.As<Napi::String>().Utf8Value(), std::move(words)).second)
      throw Napi::TypeError::New(env, where + ".requestId appears twice");
  }
  return out;
}

Napi::Float32Array float32_array(Napi::Env env, const std::vector<float>& v) {
  Napi::Float32Array a = Napi::Float32Array::New(env, v.size());
  std::memcpy(a.Data(), v.data(), v.size() * sizeof(float));
  return a;
}

Napi::Object result_to_js(Napi::Env env, StepResult& r) {
  Napi::Object out = Napi::Object::New(env);
  Napi::Array rows = Napi::Array::New(env, r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    StepRowResult& rr = r.rows[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("requestId", rr.request_id);
    if (!rr.error.empty()) o.Set("error", rr.error);
    if (rr.has_token) o.Set("token", Napi::Number::New(env, rr.token));
    if (rr.accepted >= 0) o.Set("accepted", Napi::Number::New(env, rr.accepted));
    if (rr.has_logprob) {
      o.Set("logprob", Napi::Number::New(env, rr.logprob));
      if (!rr.top_logprobs.empty()) {
        Napi::Array top = Napi::Array::New(env, rr.top_logprobs.size());
        for (size_t k = 0; k < rr.top_logprobs.size(); ++k) {
          Napi::Object t = Napi::Object::New(env);
          t.Set("token", Napi::Number::New(env, rr.top_logprobs[k].first));
          t.Set("logprob", Napi::Number::New(env, rr.top_logprobs[k].second));
          top.Set(uint32_t(k), t);
        }
        o.Set("topLogprobs", top);
      }
    }
    if (!rr.logits.empty()) o.Set("logits", float32_array(env, rr.logits));
    if (!rr.hidden.empty()) o.Set("hidden", float32_array(env, rr.hidden));
    rows.Set(uint32_t(i), o);
  }
  out.Set("rows", rows);
  Napi::Object t = Napi::Object::New(env);
  t.Set("forwardMs", Napi::Number::New(env, r.forward_ms));
  t.Set("sampleMs", Napi::Number::New(env, r.sample_ms));
  t.Set("maskWaitMs", Napi::Number::New(env, r.mask_wait_ms));
  t.Set("tokens", Napi::Number::New(env, double(r.tokens)));
  t.Set("dispatches", Napi::Number::New(env, double(r.dispatches)));
  if (r.ahead) t.Set("ahead", Napi::Boolean::New(env, true));
  if (r.expert_runs >= 0) {
    Napi::Object m = Napi::Object::New(env);
    m.Set("expertRuns", Napi::Number::New(env, double(r.expert_runs)));
    m.Set("activeExperts", Napi::Number::New(env, double(r.active_experts)));
    m.Set("routedRows", Napi::Number::New(env, double(r.routed_rows)));
    m.Set("expertBytes", Napi::Number::New(env, double(r.expert_bytes)));
    t.Set("moe", m);
  }
  out.Set("timings", t);
  return out;
}

}  // namespace rapid
