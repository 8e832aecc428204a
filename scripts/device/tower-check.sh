#!/usr/bin/env bash
# GPU checks of the CUDA vision towers (cuda/cuda_ops.h), run by the lead on the H100/H200 box from the repository
# root. Nothing is built there: the test binaries are built on the dev machine and carried.
#   here:    RAPID_WERROR=1 node scripts/build-cuda.mjs --tests
#            tar -C build/cuda/tests -cf - cuda_ops_test cuda_tower_bench cuda_matmul_test \
#              | xz -T0 --lzma2=preset=6,dict=128MiB > build/cuda/tower-check.tar.xz   # 3 x 28 MB -> 18 MB
#   device:  run(command="bash scripts/device/tower-check.sh", carry=["build/cuda/tower-check.tar.xz"])
# (the binaries share most of their device code, so the archive fits the carry limit where they would not).
# 1. build/cuda/tests/cuda_ops_test: every CUDA op against the CPU backend, then every tiny VLM tower fixture
#    encoded on both (one PASS/FAIL line per check).
# 2. build/cuda/tests/cuda_matmul_test: the decoder's matmuls (mma.cuh moved out of matmul_mma.cu).
# 3. Image encode time, rapid (cuda_tower_bench, --precision fast) against transformers bf16 sdpa on the same GPU
#    (bench/peers/torch_vision_tower.py, the box's python3): random Qwen2.5-VL-3B tower at 448x448 and Gemma 3 4B
#    SigLIP + projector at 896x896 and Qwen3-VL-4B at 448x448, one image and a batch of 8, 5 rounds each; medians and ratios at the end.
#    rapid runs both GEMM kernels round by round (--ab: v3, the default on sm_90a, gives the ratios; v2 is printed
#    beside it) and one profiled encode per kernel (--profile: GEMM / attention / rest ms, GEMM TFLOP/s); before it,
#    cuda_tower_bench --gemm times the GEMM alone on the towers' shapes, every kernel and v3 tile width (gemm.jsonl).
# 4. Only where node, dist/ and node_modules/ were carried too (carry build/cuda, dist, node_modules): the time to
#    first token of a one-image request on CUDA (npm run bench:vision -- --device cuda, 3B-shaped tower).
# Logs and JSON lines go to $OUT. Exit status 1 if a check failed. About 4-6 minutes of GPU time.
set -u
out=${OUT:-/tmp/tower-check}
mkdir -p "$out"
T=build/cuda/tests
rc=0
if [ ! -x "$T/cuda_ops_test" ] && [ -f build/cuda/tower-check.tar.xz ]; then
  mkdir -p "$T"
  tar -C "$T" -xJf build/cuda/tower-check.tar.xz 2> /dev/null ||
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" build/cuda/tower-check.tar.xz "$T"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

timeout 300 "$T/cuda_ops_test" test/fixtures/vlm 2>&1 | tee "$out/cuda_ops_test.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ -x "$T/cuda_matmul_test" ]; then
  timeout 120 "$T/cuda_matmul_test" > "$out/cuda_matmul_test.log" 2>&1 || rc=1
  grep -E '^(FAIL|ALL|FAILED)' "$out/cuda_matmul_test.log" | tail -5
else
  echo "SKIP cuda_matmul_test: not carried"
fi

timeout 120 "$T/cuda_tower_bench" --gemm --rounds 5 2>&1 | tee "$out/gemm.jsonl" || rc=1
for fam in qwen2_5_vl gemma3 qwen3_vl; do
  grid=(); [ "$fam" = qwen3_vl ] && grid=(--grid 1 28 28)
  dir=/tmp/rapid-tower-$fam
  timeout 300 "$T/cuda_tower_bench" --family "$fam" --dir "$dir" --rounds 5 --images 8 --precision fast --ab --profile \
    2> "$out/rapid-$fam.err" | tee "$out/rapid-$fam.jsonl" || rc=1
  for n in 1 8; do
    printf 'run\nrun\nrun\nrun\nrun\n' | timeout 300 python3 bench/peers/torch_vision_tower.py --config "$dir/config.json" \
      --threads 16 --family "$fam" "${grid[@]}" --device cuda --dtype bf16 --images "$n" \
      > "$out/torch-$fam-$n.jsonl" 2> "$out/torch-$fam-$n.err" || { rc=1; tail -3 "$out/torch-$fam-$n.err"; }
  done
done

if command -v node > /dev/null 2>&1 && [ -f dist/bench/vision.js ] && [ -d node_modules ] && [ -f build/cuda/rapid_native.node ]; then
  timeout 240 node bench/run.js vision --device cuda --skip-fixtures --tower-runs 3 --torch python3 \
    --json "$out/bench-vision-cuda.json" > "$out/bench-vision-cuda.txt" 2>&1 || rc=1
  tail -8 "$out/bench-vision-cuda.txt"
else
  echo "SKIP time to first token: node, dist/, node_modules/ or build/cuda/rapid_native.node not carried"
fi

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
def lines(p):
    try:
        return [json.loads(l) for l in open(os.path.join(out, p)) if l.startswith("{")]
    except FileNotFoundError:
        return []
rows = []
for fam in ("qwen2_5_vl", "gemma3", "qwen3_vl"):
    r = lines(f"rapid-{fam}.jsonl")
    for n in (1, 8):
        main = "v3" if any(x.get("gemm") == "v3" for x in r) else "v2"
        rm = [x["ms"] for x in r if x.get("images") == n and x.get("gemm", main) == main]
        r1 = [x["ms"] for x in r if x.get("images") == n and x.get("gemm") == "v2"] if main == "v3" else []
        if r1:
            print(f"{fam} x{n}: rapid GEMM v2 {statistics.median(r1):.1f} ms [{min(r1):.1f}-{max(r1):.1f}]")
        tm = [x["ms"] for x in lines(f"torch-{fam}-{n}.jsonl") if "ms" in x]
        if not rm or not tm:
            print(f"{fam} x{n}: missing results (rapid {len(rm)}, torch {len(tm)})")
            continue
        a, b = statistics.median(rm), statistics.median(tm)
        rows.append({"family": fam, "images": n, "rapidMs": a, "torchMs": b, "ratio": b / a,
                     "rapidSpread": [min(rm), max(rm)], "torchSpread": [min(tm), max(tm)]})
        print(f"{fam} x{n}: rapid {a:.1f} ms [{min(rm):.1f}-{max(rm):.1f}], transformers bf16 sdpa {b:.1f} ms "
              f"[{min(tm):.1f}-{max(tm):.1f}]: {b / a:.2f}x")
for x in lines("rapid-qwen2_5_vl.jsonl") + lines("rapid-gemma3.jsonl") + lines("rapid-qwen3_vl.jsonl"):
    if x.get("profile"):
        print(f"{x['family']} profile {x['gemm']}: total {x['totalMs']:.1f} ms, GEMM {x['gemmMs']:.1f} ms "
              f"({x['gemmTflops']:.0f} TFLOP/s), attention {x['attentionMs']:.1f} ms, rest {x['restMs']:.1f} ms")
json.dump(rows, open(os.path.join(out, "tower-ratios.json"), "w"), indent=1)
PY
echo "tower-check: exit $rc"
exit $rc
