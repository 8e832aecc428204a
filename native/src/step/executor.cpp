#include "step/executor.h"
#include "step/error_text.h"
#include "step/verify.h"
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>
#include <unordered_set>

namespace rapid {

std::string validate_row(const StepRow& row, const ModelInfo& info, const KvPool& kv) {
  if (!row.error.empty()) return row.error;
  const int64_t n = int64_t(row.tokens.size());
  if (row.request_id.empty()) return "requestId is empty";
  if (n == 0) return "row has no tokens";
  for (int32_t t : row.tokens)
    if (t < 0 || t >= info.vocab_size)
      return "token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(info.vocab_size) + ")";
  if (int64_t(row.positions.size()) != info.pos_axes * n)
    return "positions has " + std::to_string(row.positions.size()) + " entries, expected " +
           std::to_string(info.pos_axes * n) + (info.pos_axes > 1 ? " (mRoPE: 3 axes x tokens)" : "");
  for (int32_t p : row.positions)
    if (p < 0) return "position " + std::to_string(p) + " is negative";
  if (row.context_len < 0) return "contextLen must be >= 0";
  const int64_t need = (row.context_len + n + kv.block_size() - 1) / kv.block_size();
  if (int64_t(row.block_table.size()) < need)
    return "blockTable has " + std::to_string(row.block_table.size()) + " blocks; contextLen " +
           std::to_string(row.context_len) + " + " + std::to_string(n) + " tokens need " + std::to_string(need) +
           " of " + std::to_string(kv.block_size()) + " tokens";
  for (int32_t b : row.block_table)
    if (b < 0 || b >= kv.num_blocks())
      return "block id " + std::to_string(b) + " is outside the KV pool [0, " + std::to_string(kv.num_blocks()) + ")";
  if (row.want_hidden && (row.has_sample || row.want_logits))
    return "wantHidden: a row that returns its hidden state neither samples nor returns logits";
  if (info.embedding_only && (row.has_sample || row.want_logits))
    return "this model (" + info.architecture + ") is an embedding model with no LM head: its rows take wantHidden, never sample";
  if (row.has_sample) {
    std::string e = validate_sample_params(row.sample, info.vocab_size);
    if (!e.empty()) return e;
  }
  if (row.draft != 0) {
    if (row.draft < 0 || row.draft >= n)
      return "draft must be in [0, " + std::to_string(n) + ") (the row's tokens after its first), got " + std::to_string(row.draft);
    if (!row.has_sample || row.want_logits || row.want_hidden) return "draft: a row with a draft samples, and returns neither logits nor hidden";
    if (row.sample.logprobs >= 0 || row.mask_pending || !row.sample.bitmask.empty())
      return "draft: a row with a draft takes no logprobs and no grammar bitmask";
  }
  if (row.has_embeds) {
    if (!info.accepts_embeds)
      return "embeds: this model (" + info.architecture + ") has no vision tower, so it takes no image embeddings";
    const int64_t m = int64_t(row.embed_offsets.size());
    for (int64_t i = 0; i < m; ++i) {
      const int32_t o = row.embed_offsets[size_t(i)];
      if (o < 0 || o >= n) return "embeds.offsets[" + std::to_string(i) + "] = " + std::to_string(o) +
                                  " is outside the row's tokens [0, " + std::to_string(n) + ")";
      if (i > 0 && o <= row.embed_offsets[size_t(i - 1)]) return "embeds.offsets must be strictly increasing";
    }
    if (int64_t(row.embed_data.size()) != m * info.hidden_size)
      return "embeds.data has " + std::to_string(row.embed_data.size()) + " values, expected " +
             std::to_string(m * info.hidden_size) + " (" + std::to_string(m) + " offsets x hidden " +
             std::to_string(info.hidden_size) + ")";
    const int64_t ds = int64_t(info.deepstack_layers) * m * info.hidden_size;
    if (int64_t(row.embed_deepstack.size()) != ds)
      return "embeds.deepstack has " + std::to_string(row.embed_deepstack.size()) + " values, expected " +
             std::to_string(ds) + " (" + std::to_string(info.deepstack_layers) + " DeepStack layers x " +
             std::to_string(m) + " offsets x hidden " + std::to_string(info.hidden_size) + ")";
  }
  if (row.bidirectional.size() % 2 != 0) return "bidirectional must hold [start, end) pairs (even length)";
  for (size_t i = 0; i < row.bidirectional.size(); i += 2) {
    const int32_t s = row.bidirectional[i], e = row.bidirectional[i + 1];
    if (s < 0 || e > n || s >= e)
      return "bidirectional pair [" + std::to_string(s) + ", " + std::to_string(e) + ") is not a non-empty range of the row's tokens [0, " +
             std::to_string(n) + ")";
    if (i > 0 && s < row.bidirectional[i - 1]) return "bidirectional pairs must be sorted and disjoint";
  }
  return "";
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Fills the pending rows' masks from the source (waiting for them); a row that gets none fails alone.
static void take_late_masks(StepPlan& plan, const std::vector<bool>& ok, MaskSource* masks, int64_t vocab,
                            StepResult& res, std::vector<bool>& can_sample) {
  LateMasks got;
  if (masks) got = masks->wait();
  else got.error = "the row's bitmask is pending but this step has no mask source";
  const size_t words = size_t((vocab + 31) / 32);
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    StepRow& row = plan.rows[r];
    if (!ok[r] || !row.has_sample || !row.mask_pending) continue;
    std::string err;
    auto it = got.masks.find(row.request_id);
    if (!got.supplied) err = got.error;
    else if (it == got.masks.end()) err = "no grammar bitmask was supplied for this row";
    else if (it->second.empty()) err = "the grammar bitmask was withheld (the request ended while the step ran)";
    else if (it->second.size() != words)
      err = "bitmask has " + std::to_string(it->second.size()) + " words, expected " + std::to_string(words);
    else row.sample.bitmask = std::move(it->second);
    if (!err.empty()) {
      res.rows[r].error = err;
      can_sample[r] = false;
    }
  }
}

StepResult execute_step(Model& model, KvPool& kv, ThreadPool& pool, Precision precision, StepPlan& plan,
                        MaskSource* masks) {
  const ModelInfo& info = model.info();
  const int64_t vocab = info.vocab_size;
  StepResult res;
  res.rows.resize(plan.rows.size());

  // Validate; a block may be written by only one row per step (shared prefix blocks are read-only).
  std::vector<bool> ok(plan.rows.size(), false);
  std::unordered_set<std::string> ids;
  std::set<int32_t> written;
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    const StepRow& row = plan.rows[r];
    StepRowResult& out = res.rows[r];
    out.request_id = row.request_id;
    std::string err = validate_row(row, info, kv);
    if (err.empty() && !ids.insert(row.request_id).second) err = "duplicate requestId in this step";
    if (err.empty()) {
      const int64_t n = int64_t(row.tokens.size()), bs = kv.block_size();
      std::vector<int32_t> mine;
      for (int64_t s = row.context_len / bs; s <= (row.context_len + n - 1) / bs; ++s) mine.push_back(row.block_table[size_t(s)]);
      for (int32_t b : mine)
        if (written.count(b)) { err = "KV block " + std::to_string(b) + " is written by another row in this step"; break; }
      if (err.empty()) written.insert(mine.begin(), mine.end());
    }
    if (!err.empty()) out.error = err;
    else ok[r] = true;
    // Top-k over the whole vocabulary keeps every token: it is off, and draws as a row without top-k does.
    if (ok[r] && row.has_sample && row.sample.top_k >= vocab) plan.rows[r].sample.top_k = 0;
  }

  // One batch over every valid row; logits for each sampling row's last token and wantLogits rows.
  Batch batch;
  // A draft row samples n_verify = draft + 1 consecutive logit rows from sample_logit.
  struct Where { int64_t first_logit = -1; int64_t n_logits = 0; int64_t sample_logit = -1; int64_t n_verify = 1; int64_t hidden_row = -1; };
  std::vector<Where> where(plan.rows.size());
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    if (!ok[r]) continue;
    const StepRow& row = plan.rows[r];
    const int64_t start = int64_t(batch.tokens.size()), n = int64_t(row.tokens.size());
    batch.tokens.insert(batch.tokens.end(), row.tokens.begin(), row.tokens.end());
    batch.spans.push_back({start, n, row.context_len, row.block_table.data(), int64_t(row.block_table.size()),
                           row.bidirectional.data(), int64_t(row.bidirectional.size() / 2)});
    if (row.has_embeds) {
      const int64_t m = int64_t(row.embed_offsets.size()), H = info.hidden_size;
      for (int64_t i = 0; i < m; ++i)
        batch.embeds.push_back({start + row.embed_offsets[size_t(i)], row.embed_data.data() + i * H,
                                row.embed_deepstack.empty() ? nullptr : row.embed_deepstack.data() + i * H, m * H});
    }
    if (row.want_hidden) {
      where[r].hidden_row = int64_t(batch.hidden_rows.size());
      batch.hidden_rows.push_back(start + n - 1);
    }
    if (row.want_logits) {
      where[r].first_logit = int64_t(batch.logit_rows.size());
      where[r].n_logits = n;
      for (int64_t i = 0; i < n; ++i) batch.logit_rows.push_back(start + i);
      if (row.has_sample) where[r].sample_logit = where[r].first_logit + n - 1;
    } else if (row.has_sample) {
      where[r].sample_logit = int64_t(batch.logit_rows.size());
      where[r].n_verify = row.draft + 1;
      for (int64_t i = n - 1 - row.draft; i < n; ++i) batch.logit_rows.push_back(start + i);
    }
  }
  const int64_t T = int64_t(batch.tokens.size());
  res.tokens = T;
  // positions are axis-major per row; the batch keeps them axis-major over all T tokens.
  batch.positions.resize(size_t(info.pos_axes * T));
  for (size_t r = 0, s = 0; r < plan.rows.size(); ++r) {
    if (!ok[r]) continue;
    const SeqSpan& sp = batch.spans[s++];
    for (int a = 0; a < info.pos_axes; ++a)
      std::memcpy(batch.positions.data() + a * T + sp.start, plan.rows[r].positions.data() + a * sp.n,
                  size_t(sp.n) * sizeof(int32_t));
  }
  if (T == 0) return res;

  auto t0 = std::chrono::steady_clock::now();
  // Host logits [rows, vocab]: every logit row on the CPU; with a device backend only the rows that must
  // reach the host (wantLogits, non-greedy sampling), compacted; host_row maps a logit row to its place.
  DeviceLogits* dev = model.device_logits();
  const int64_t m = int64_t(batch.logit_rows.size());
  std::vector<float> logits;
  std::vector<int64_t> host_row(size_t(m), -1);
  if (!dev) {
    logits.resize(size_t(m) * size_t(vocab));
    for (int64_t i = 0; i < m; ++i) host_row[size_t(i)] = i;
  }
  // Pooled rows: every backend's forward writes them to the host (small: one hidden row each).
  std::vector<float> hidden(batch.hidden_rows.size() * size_t(info.hidden_size));
  batch.hidden = hidden.empty() ? nullptr : hidden.data();
  const uint64_t dispatched = pool.dispatches();
  model.forward(batch, kv, pool, precision, dev ? nullptr : logits.data());
  res.dispatches = int64_t(pool.dispatches() - dispatched);
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    if (!ok[r] || where[r].hidden_row < 0) continue;
    const float* first = hidden.data() + where[r].hidden_row * info.hidden_size;
    res.rows[r].hidden.assign(first, first + info.hidden_size);
  }
  res.forward_ms = ms_since(t0);
  res.ahead = dev && dev->ahead();
  if (const MoeStats* ms = model.moe_stats()) {
    res.expert_runs = ms->expert_runs;
    res.active_experts = ms->active_experts;
    res.routed_rows = ms->routed_rows;
    res.expert_bytes = ms->expert_bytes;
  }

  // Masks computed on the JS thread while the forward ran are needed only now.
  std::vector<bool> can_sample(ok);
  bool any_pending = false;
  for (size_t r = 0; r < plan.rows.size(); ++r) any_pending |= ok[r] && plan.rows[r].has_sample && plan.rows[r].mask_pending;
  if (any_pending) {
    t0 = std::chrono::steady_clock::now();
    take_late_masks(plan, ok, masks, vocab, res, can_sample);
    res.mask_wait_ms = ms_since(t0);
  }

  t0 = std::chrono::steady_clock::now();
  std::vector<size_t> samplers;   // rows sampled on the host
  std::vector<size_t> on_device;  // rows sampled where the logits are (all but those that ask for logprobs)
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    if (!ok[r] || !plan.rows[r].has_sample || !can_sample[r]) continue;
    (dev && plan.rows[r].sample.logprobs < 0 ? on_device : samplers).push_back(r);
  }
  if (dev) {
    // Logit rows copied to the host: every wantLogits row's (contiguous), then the host samplers' others.
    std::vector<int64_t> need;
    for (size_t r = 0; r < plan.rows.size(); ++r)
      if (ok[r])
        for (int64_t i = 0; i < where[r].n_logits; ++i) need.push_back(where[r].first_logit + i);
    for (size_t r : samplers)
      if (where[r].n_logits == 0)
        for (int64_t i = 0; i < where[r].n_verify; ++i) need.push_back(where[r].sample_logit + i);
    for (size_t i = 0; i < need.size(); ++i) host_row[size_t(need[i])] = int64_t(i);
    logits.resize(need.size() * size_t(vocab));
    if (!need.empty()) dev->copy_rows(need, logits.data());
    if (!on_device.empty()) {
      // A draft row samples every verification position where the logits are (params_at each).
      std::vector<int64_t> rows;
      std::vector<const SampleParams*> params;
      std::vector<size_t> first(on_device.size());
      std::vector<std::vector<SampleParams>> shifted(on_device.size());
      for (size_t j = 0; j < on_device.size(); ++j) {
        const size_t r = on_device[j];
        const StepRow& row = plan.rows[r];
        first[j] = rows.size();
        const int32_t* draft = row.tokens.data() + row.tokens.size() - size_t(row.draft);
        for (int64_t i = 1; i < where[r].n_verify; ++i) shifted[j].push_back(params_at(row.sample, draft, i));
        for (int64_t i = 0; i < where[r].n_verify; ++i) {
          rows.push_back(where[r].sample_logit + i);
          params.push_back(i == 0 ? &row.sample : &shifted[j][size_t(i - 1)]);
        }
      }
      std::vector<int32_t> sampled(rows.size(), -1);
      dev->sample(rows, params, sampled.data());
      for (size_t j = 0; j < on_device.size(); ++j) {
        const size_t r = on_device[j];
        const StepRow& row = plan.rows[r];
        StepRowResult& out = res.rows[r];
        const int64_t k = row.draft;
        VerifyOutcome v = accept_prefix(sampled.data() + first[j], row.tokens.data() + row.tokens.size() - size_t(k), k);
        if (k > 0) out.accepted = v.accepted;
        if (v.token >= 0) {
          out.has_token = true;
          out.token = v.token;
        } else {
          out.error = row.sample.bitmask.empty()
                          ? "sampling failed: logits contain no finite value (NaN or all masked)"
                          : "sampling failed: grammar bitmask allows no token with a finite logit";
        }
      }
    }
  }
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    if (!ok[r] || where[r].n_logits == 0) continue;
    const float* first = logits.data() + host_row[size_t(where[r].first_logit)] * vocab;
    res.rows[r].logits.assign(first, first + where[r].n_logits * vocab);
  }
  // Rows sample independently; each thread takes whole rows, so the result never depends on neighbours.
  pool.parallel_for(int64_t(samplers.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const size_t r = samplers[size_t(i)];
      StepRowResult& out = res.rows[r];
      const SampleParams& sp = plan.rows[r].sample;
      const float* at = logits.data() + host_row[size_t(where[r].sample_logit)] * vocab;
      try {
        if (plan.rows[r].draft > 0) {
          const StepRow& row = plan.rows[r];
          const int64_t k = row.draft;
          VerifyOutcome v = verify_draft(at, vocab, sp, row.tokens.data() + row.tokens.size() - size_t(k), k);
          out.has_token = true;
          out.token = v.token;
          out.accepted = v.accepted;
          continue;
        }
        SampleOutput so = sample_row(at, vocab, sp);
        out.has_token = true;
        out.token = so.token;
        if (sp.logprobs >= 0) {
          out.has_logprob = true;
          out.logprob = so.logprob;
          out.top_logprobs = std::move(so.top);
        }
      } catch (const std::exception& ex) {
        out.error = "sampling failed: " + readable_error(ex);
      }
    }
  });
  res.sample_ms = ms_since(t0);
  return res;
}

}  // namespace rapid
