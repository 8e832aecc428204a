// llama-batched-bench's decode figure (S_TG) from libllama alone: llama.cpp's common/ (which the real
// tool links) takes most of an hour to build on a busy 2-core machine. npl sequences, npp prompt tokens
// each, then ntg decode steps of npl tokens, one token per sequence. Usage: MODEL NPL NPP NTG THREADS.
// Build (L: a llama.cpp checkout built with cmake, its libllama target is enough):
//   g++ -O2 -std=c++17 bench/peers/llama_batched_tg.cpp -I$L/include -I$L/ggml/include -L$L/build/bin
//       -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o /tmp/llama_batched_tg
#include "llama.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL NPL NPP NTG THREADS\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  int npl = atoi(argv[2]), npp = atoi(argv[3]), ntg = atoi(argv[4]), nt = atoi(argv[5]);
  llama_backend_init();
  auto mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(path, mp);
  if (model == nullptr) return 1;
  auto cp = llama_context_default_params();
  cp.n_ctx = npl * (npp + ntg) + 64; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_seq_max = npl;
  cp.n_threads = nt; cp.n_threads_batch = nt;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  llama_batch b = llama_batch_init(512, 0, 1);
  auto add = [&](int tok, int pos, int seq, bool logits) {
    int i = b.n_tokens++;
    b.token[i] = tok; b.pos[i] = pos; b.n_seq_id[i] = 1; b.seq_id[i][0] = seq; b.logits[i] = logits;
  };
  const auto tp = std::chrono::steady_clock::now();
  for (int s = 0; s < npl; ++s)
    for (int p = 0; p < npp; ++p) {
      add(100 + (s * 7 + p * 13) % 1000, p, s, p == npp - 1);
      if (b.n_tokens == 512) { if (llama_decode(ctx, b)) return 1; b.n_tokens = 0; }
    }
  if (b.n_tokens) { if (llama_decode(ctx, b)) return 1; b.n_tokens = 0; }
  llama_synchronize(ctx);
  // Prefill (llama-batched-bench's S_PP): npl * npp prompt tokens in batches of 512, cold caches.
  const double tpp = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
  printf("npl %d npp %d threads %d: T_PP %.3f s, S_PP %.1f tok/s\n", npl, npp, nt, tpp, npl * npp / tpp);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < ntg; ++i) {
    b.n_tokens = 0;
    for (int s = 0; s < npl; ++s) add(200 + (s + i) % 1000, npp + i, s, true);
    if (llama_decode(ctx, b)) return 1;
    llama_synchronize(ctx);
  }
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("npl %d npp %d ntg %d threads %d: T_TG %.3f s, S_TG %.1f tok/s\n", npl, npp, ntg, nt, t, npl * ntg / t);
  llama_batch_free(b); llama_free(ctx); llama_model_free(model);
  return 0;
}
