#!/usr/bin/env bash
# The CUDA KV-cache dtype checks (docs/kv-cache.md), run on the GPU box from the repository root. Nothing is built
# there: build/cuda/ comes from `RAPID_WERROR=1 node scripts/build-cuda.mjs --tests` on the build machine, and dist/
# (for the bench; `npx tsc -p tsconfig.json`) where carried. About 2-3 minutes of GPU time in all.
#   bash scripts/device/kv-check.sh [OUT_DIR]   (logs per step in OUT_DIR, default $OUT or /tmp/kv-check)
# Exits 1 when any step fails; every step runs under a time limit, so nothing hangs.
set -u
out="${1:-${OUT:-/tmp/kv-check}}"
mkdir -p "$out"
fail=0
. "$(dirname "$0")/step.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
# Write kernels' bytes against the CPU pool (kv::store_slot), attention over each dtype against the CPU's and bitwise
# against f32 attention over the widened values.
step kv-test 90 build/cuda/tests/cuda_kv_test
# The RoPE epilogue into f32 / f16 / bf16 pools == matmul + rope_kv_write, and every other matmul case.
step matmul-test 150 build/cuda/tests/cuda_matmul_test
# The f32 attention and KV write cases as before the change (the kernels are templates over the dtype now).
step layers-test 150 build/cuda/tests/cuda_layers_test
# Fixtures per dtype against transformers and the CPU (tolerances f32 1e-3, f16 3e-3, bf16 2e-2, int8 4e-2; greedy
# agreement reported), the default dtype, the RoPE epilogue and batch invariance (both under the default dtype).
step cuda-checks 300 node test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node --only kvdtype,rope,batch
if [ -f dist/bench/kv-dtype.js ]; then
  # Decode after a 1024-token prompt, dtypes interleaved round by round: ratios against f32 of the same run.
  step bench-b1 120 node bench/run.js kv-dtype --device cuda --dtypes f32,bf16,f16,int8 --rounds 3 --steps 64
  step bench-b16 120 node bench/run.js kv-dtype --device cuda --dtypes f32,bf16,int8 --rounds 3 --steps 32 --concurrency 16
else
  echo "== bench skipped: dist/ not carried (npx tsc -p tsconfig.json && node scripts/copy-assets.mjs, then carry dist)"
fi
echo "== kv-check: $([ "$fail" -eq 0 ] && echo 'all steps passed' || echo 'FAILED'), logs in $out"
exit "$fail"
