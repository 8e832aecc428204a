#!/usr/bin/env bash
# GPU checks of Gemma 4 26B-A4B's mixture-of-experts block on CUDA (CudaOps::moe over cuda/moe.cu, issue 34), run by
# the lead on the H100/H200 box from the repository root. Nothing is built there: the addon and the test binary come
# from the build machine in one xz tarball (the carry limit, 64 MiB, counts the tracked tree too).
#   here:    RAPID_CUDA_ARCHS=90 RAPID_WERROR=1 node scripts/build-cuda.mjs --tests --sass-only   # no PTX: 3x smaller
#            mkdir -p /tmp/g4moe/tests
#            strip --strip-unneeded -o /tmp/g4moe/rapid_native.node build/cuda/rapid_native.node
#            strip --strip-unneeded -o /tmp/g4moe/tests/cuda_moe_test build/cuda/tests/cuda_moe_test
#            tar -C /tmp/g4moe -cf - rapid_native.node tests/cuda_moe_test \
#              | xz -T1 --lzma2=preset=6,dict=64MiB > build/cuda/g4moe-check.tar.xz   # 2 x 16 MB -> 5.6 MB
#   device:  run(command="bash scripts/device/g4moe-check.sh", carry=["build/cuda/g4moe-check.tar.xz"])
# Steps (each under a time limit; logs in $OUT or /tmp/g4moe-check):
# 1. cuda_moe_test: the CUDA MoE block against layers/moe.cpp: the Qwen cases as before and Gemma 4's router (input
#    RMSNorm · scale · mult, per-expert scale, route_x != expert_x, out overwritten) with 4-bit g64 and bf16 experts,
#    E = 128 top-8 and E = 8 top-2, T = 1/7/64; CudaOps::moe == the kernels bitwise and vs CpuBackend::moe; bitwise
#    batch invariance and a replayed graph.
# 2. cuda-checks parity, agree and batch on the gemma4-moe VLM text lanes (f32 and q4: transformers' logits and greedy
#    tokens, the CPU run of the same addon, one row alone vs batched) and, as a guard of the fused decoder's MoE path
#    (cuda/moe.cu's kernels changed under it), the Qwen3-VL-MoE lanes.
# Exit status 1 if a step failed. About 2-4 minutes of GPU time.
set -u
out="${OUT:-/tmp/g4moe-check}"
mkdir -p "$out"
fail=0
. "$(dirname "$0")/step.sh"
[ -f build/cuda/g4moe-check.tar.xz ] && unpack build/cuda/g4moe-check.tar.xz build/cuda
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1

step moe-test 300 build/cuda/tests/cuda_moe_test
step cuda-checks 420 node test/cuda/cuda-checks.mjs --addon build/cuda/rapid_native.node --only parity,agree,batch \
  --filter 'gemma4-moe|qwen3_vl_moe' --json "$out/cuda-checks.json"
if grep -q 'gemma4-moe.*\(runs on the CPU\|rejects it\)' "$out/cuda-checks.log"; then
  echo "== gemma4-moe lanes refused by --device cuda (Gemma 4's hold-back in ops_model_problem?): nothing verified"
  fail=1
fi
echo "== g4moe-check: $([ "$fail" -eq 0 ] && echo 'all steps passed' || echo 'FAILED'), logs in $out"
exit "$fail"
