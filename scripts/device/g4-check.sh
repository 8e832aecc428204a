#!/usr/bin/env bash
# GPU checks of Gemma 4 on the CUDA op backend (models/gemma4.cpp's forward over cuda/cuda_ops, issue 34), run by
# the lead on the H100/H200 box from the repository root. Nothing is built there: the addon and the test binary are
# built on the dev machine and carried; node is carried separately.
#   here:    RAPID_CUDA_ARCHS=90 RAPID_WERROR=1 node scripts/build-cuda.mjs --tests
#            tar -C build/cuda/tests -cf - cuda_decoder_ops_test | xz -T0 > build/cuda/g4-check.tar.xz
#   device:  run(command="bash scripts/device/g4-check.sh",
#                carry=["build/cuda/g4-check.tar.xz", "build/cuda/rapid_native.node", "build/Release/rapid_native.node"])
# 1. build/cuda/tests/cuda_decoder_ops_test: embed_rows, softcap, write_kv + paged_attention (sliding window, GQA,
#    bidirectional blocks, head_dim 64/256/512, KV sharing, f32/f16/bf16/int8 KV) on CUDA against the CPU backend.
# 2. test/cuda/cuda-checks.mjs --only parity,agree --filter gemma4: the gemma4-e VLM text lanes (f32 and q4) on CUDA
#    against transformers' logits and greedy tokens (parity) and against the CPU addon (agree), with the dense
#    families' tolerances; the gemma4-moe lanes too (their fast agree is reported, not required).
# 2b. Two of those processes at once, 6 rounds (gemma4-e, parity/agree/batch): session 29's stream-ordering bug only
#    showed when another process shared the GPU (docs/cuda.md, "Gemma 4 decoders").
# 3. The same for every other fixture (no regression in the dense CUDA decoder that make_cuda_model still picks).
# Logs go to $OUT. Exit status 1 if a check failed. About 3-6 minutes of GPU time.
set -u
out=${OUT:-/tmp/g4-check}
mkdir -p "$out"
T=build/cuda/tests
rc=0
[ -x "$T/cuda_decoder_ops_test" ] || { mkdir -p "$T" && tar -C "$T" -xJf build/cuda/g4-check.tar.xz; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"

timeout 180 "$T/cuda_decoder_ops_test" 2>&1 | tee "$out/cuda_decoder_ops_test.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

NODE=${NODE:-node}
if command -v "$NODE" > /dev/null 2>&1 && [ -f build/cuda/rapid_native.node ]; then
  cpu=()
  [ -f build/Release/rapid_native.node ] && cpu=(--cpu-addon build/Release/rapid_native.node)
  timeout 300 "$NODE" test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node "${cpu[@]}" \
    --only parity,agree --filter gemma4 --json "$out/g4-checks.json" 2>&1 | tee "$out/g4-checks.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  for r in 1 2 3 4 5 6; do
    pids=()
    for p in a b; do
      timeout 150 "$NODE" test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node "${cpu[@]}" \
        --only parity,agree,batch --filter gemma4-e > "$out/pair$r$p.txt" 2>&1 & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    echo "two at once, round $r: $(tail -qn1 "$out/pair${r}a.txt") | $(tail -qn1 "$out/pair${r}b.txt")"
  done
  timeout 400 "$NODE" test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node "${cpu[@]}" \
    --only parity,agree,batch --json "$out/all-checks.json" > "$out/all-checks.txt" 2>&1 || rc=1
  tail -4 "$out/all-checks.txt"
else
  echo "SKIP cuda-checks: node or build/cuda/rapid_native.node not carried"
fi
# 4. Only where dist/ and node_modules/ were carried too: the issue's speed target, Gemma 4 E2B-shaped decode (random
#    4-bit weights) on CUDA against transformers bf16 sdpa on the same GPU, concurrency 1 and 8 (bench:gemma4).
if command -v "$NODE" > /dev/null 2>&1 && [ -f dist/bench/gemma4.js ] && [ -d node_modules ]; then
  timeout 500 "$NODE" bench/run.js gemma4 --device cuda --torch python3 --steps 32 > "$out/bench-gemma4-cuda.txt" 2>&1 || rc=1
  tail -4 "$out/bench-gemma4-cuda.txt"
else
  echo "SKIP gemma4 decode bench: dist/ or node_modules/ not carried"
fi
echo "g4-check: exit $rc"
exit $rc
