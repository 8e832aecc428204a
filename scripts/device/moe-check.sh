#!/usr/bin/env bash
# GPU checks of the CUDA mixture-of-experts block (cuda/moe.*, issue 34), run by the lead on the H100/H200 box from
# the repository root. Nothing of rapid is built there: the addon and the test binary come from the build machine.
#   here:    RAPID_CUDA_ARCHS=90 RAPID_WERROR=1 node scripts/build-cuda.mjs --tests --sass-only
#            npx tsc -p tsconfig.json && node scripts/copy-assets.mjs          # dist/, for cuda-checks' bench step
#            tar -C build/cuda -cf - rapid_native.node tests/cuda_moe_test \
#              | xz -T0 --lzma2=preset=6,dict=64MiB > build/cuda/moe-check.tar.xz   # 2 x 16 MB -> 6 MB
#            (with PTX, 18 MB: over the 64 MiB carry limit next to the 56 MiB tracked tree)
#   device:  run(command="bash scripts/device/moe-check.sh", carry=["build/cuda/moe-check.tar.xz", "dist"])
# Steps (each under a time limit; logs in $OUT or /tmp/moe-check):
# 1. cuda_moe_test: the CUDA MoE block against layers/moe.cpp on random weights (4-bit g64/g32, 8-bit, bf16 experts;
#    T 1/7/64/300; E 8/128; top-2/8), bitwise batch invariance and a replayed graph.
# 2. cuda-checks parity, batch and agree on the Qwen3-VL-MoE VLM text lanes (transformers' logits, the CPU, batch
#    invariance; the dense families' tolerances) and, as a regression guard of the dense path, qwen3-q4 and llama-q4.
# 3. Decode speed (only with dist/ carried): the random Qwen3-30B-A3B-shaped MLX 4-bit checkpoint (MOE_LAYERS of its
#    48 layers, default all: ~17 GB, generated on the box in a minute or two) at 1/8/64 sequences, `bench:cuda
#    --shapes 30b-a3b`. With a llama.cpp CUDA build (LLAMA_BIN: a folder holding llama-batched-bench; or LLAMA_SRC: a
#    carried llama.cpp checkout, built here for sm_90 only, ~8 min on 16 cores) and gguf-py (pip's gguf or
#    $LLAMA_SRC/gguf-py), the peer runs on a Q4_0 GGUF of the same shape (bench/peers/random_gguf.py 30b-a3b; the
#    bundled llama.cpp knows qwen3moe) and the report gives rapid/llama.cpp per level (issue 34's target: >= 1.5).
# Exit status 1 if a step failed.
set -u
out="${OUT:-/tmp/moe-check}"
mkdir -p "$out"
fail=0
. "$(dirname "$0")/step.sh"
if [ ! -x build/cuda/tests/cuda_moe_test ] && [ -f build/cuda/moe-check.tar.xz ]; then
  unpack build/cuda/moe-check.tar.xz build/cuda
fi
gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
echo "$gpu"

step moe-test 240 build/cuda/tests/cuda_moe_test
step cuda-checks 300 node test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node --only parity,batch,agree \
  --filter 'qwen3_vl_moe|^qwen3-q4$|^llama-q4$' --json "$out/cuda-checks.json"

if [ -f dist/bench/cuda.js ]; then
  layers="${MOE_LAYERS:-48}"
  bench_dir=/tmp/rapid-bench
  bw=3.35e12  # H100 SXM; the H200: 4.8e12
  case "$gpu" in *H200*) bw=4.8e12 ;; esac
  peer=()
  bin="${LLAMA_BIN:-}"
  if [ -z "$bin" ] && [ -n "${LLAMA_SRC:-}" ]; then
    # The peer build, sm_90 only (llama-batched-bench needs common/, not the server or the tests).
    step llama-build 900 bash -c "cmake -S '$LLAMA_SRC' -B /tmp/llama-cuda -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /dev/null && \
      cmake --build /tmp/llama-cuda -j16 --target llama-batched-bench"
    bin=/tmp/llama-cuda/bin
  fi
  if [ -n "$bin" ] && [ -x "$bin/llama-batched-bench" ]; then
    gguf=/tmp/qwen3-30b-a3b-l$layers-q4_0.gguf
    gguf_py=()
    [ -n "${LLAMA_SRC:-}" ] && gguf_py=(--gguf-py "$LLAMA_SRC/gguf-py")
    # The GGUF and rapid's checkpoint are written at the same time (both are random bytes under fixed scales).
    [ -f "$gguf" ] || (python3 bench/peers/random_gguf.py 30b-a3b "$gguf" --layers "$layers" "${gguf_py[@]}" > "$out/gguf.log" 2>&1) &
    peer=(--peer-llama "$bin" --gguf-30b-a3b "$gguf")
  else
    echo "== llama.cpp peer skipped: set LLAMA_BIN (a CUDA build's bin folder) or LLAMA_SRC (a carried checkout)"
  fi
  step prepare 600 node bench/run.js cuda --shapes 30b-a3b --moe-layers "$layers" --dir "$bench_dir" --prepare-only
  wait
  step bench 600 node bench/run.js cuda --shapes 30b-a3b --moe-layers "$layers" --dir "$bench_dir" --levels 1,8,64 \
    --prompt 128 --gen 64 --repeat 3 --skip-sampled --peak-bw "$bw" --out "$out/bench-moe.json" "${peer[@]}"
else
  echo "== bench skipped: dist/ not carried (npx tsc -p tsconfig.json && node scripts/copy-assets.mjs, then carry dist)"
fi
echo "== moe-check: $([ "$fail" -eq 0 ] && echo 'all steps passed' || echo 'FAILED'), logs in $out"
exit "$fail"
