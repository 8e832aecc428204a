#!/usr/bin/env bash
# After a training run on the device: installs its checkpoint as the default model and runs every check.
#
#   training/tiny-vlm/after_run.sh CKPT_DIR [TRAIN_LOG]      # from the repo root; RUN=N names the log (default 5)
#
# CKPT_DIR is the run's $OUT/ckpt (model.safetensors, config.json, generation_config.json,
# preprocessor_config.json, eval_results.json, training_meta.json). PYTHON must have torch (CPU is fine),
# transformers, safetensors, tokenizers, jinja2.
# Steps: weights into models/tiny-vlm (temp name + rename); eval results, meta and log into training/tiny-vlm;
# transformers' references regenerated (golden bf16, golden f32, independent f32); dist/ rebuilt; the 4-bit
# copy converted (models/tiny-vlm-4bit); the coherence gate on both sets, bf16 and 4-bit, concurrency 1 and 16,
# 95% in every category and no shape named that is not in a single-shape picture. Exits non-zero on a failure;
# nothing is committed.
set -euo pipefail
ck="${1:?usage: after_run.sh CKPT_DIR [TRAIN_LOG]}"
log="${2:-}"
PY="${PYTHON:-/work/venv/bin/python}"
cd "$(dirname "$0")/../.."
m=models/tiny-vlm
t=training/tiny-vlm

# The configs should come back as shipped (transformers' version stamp aside): a difference means the
# architecture or the pixel budget (vlm.py, run 5) changed, and the run's own file is taken.
same_json() {
  python3 -c 'import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b): d.pop("transformers_version", None)
sys.exit(a != b)' "$1" "$2"
}
for f in config.json generation_config.json preprocessor_config.json; do
  if ! same_json "$ck/$f" "$m/$f"; then echo "after_run: $ck/$f differs from $m/$f: copying it" >&2; cp "$ck/$f" "$m/$f"; fi
done
cp "$ck/model.safetensors" "$m/.model.safetensors.tmp" && mv -f "$m/.model.safetensors.tmp" "$m/model.safetensors"
for f in eval_results.json training_meta.json; do
  if [ -f "$ck/$f" ]; then cp "$ck/$f" "$t/$f"; else echo "after_run: no $ck/$f" >&2; fi
done
if [ -n "$log" ]; then cp "$log" "$t/train_run${RUN:-5}.log"; fi
ls -la "$m/model.safetensors"

echo "== transformers references (CPU)"
(cd "$t" && "$PY" golden.py eval ../../models/tiny-vlm --device cpu --out /tmp/tiny-vlm-golden-eval.json)
"$PY" - <<'EOF'
import json
r = json.load(open("/tmp/tiny-vlm-golden-eval.json"))
json.dump({x["id"]: x["output"] for x in r["results"]}, open("training/tiny-vlm/golden_reference.json", "w"), indent=1)
print("golden (bf16):", r["passed"], "/", r["total"], r["per_category"])
EOF
"$PY" scripts/fixtures/tiny-vlm/reference_f32.py
npx tsc -p tsconfig.json && node scripts/copy-assets.mjs
rgb="$(mktemp -d)"
node scripts/fixtures/tiny-vlm/decode-set.mjs "$m/independent" "$rgb"
"$PY" scripts/fixtures/tiny-vlm/independent_reference_f32.py "$rgb"
rm -rf "$rgb"

echo "== 4-bit copy (its README.md stays)"
q4="$(mktemp -d)/q4"
node bin/rapid.js convert "$m" "$q4" --quantize 4 --group-size 64
mkdir -p models/tiny-vlm-4bit && cp "$q4"/* models/tiny-vlm-4bit/ && rm -rf "$(dirname "$q4")"

echo "== coherence gate: golden and independent sets, bf16 then 4-bit"
status=0
node bin/rapid.js doctor --coherence "$m" --golden "$m/golden" --min-score 100 --concurrency 1,16 || status=1
node bin/rapid.js doctor --coherence "$m" --golden "$m/independent" --per-category --concurrency 1,16 || status=1
node bin/rapid.js doctor --coherence models/tiny-vlm-4bit --golden "$m/golden,$m/independent" --per-category --concurrency 1,16 || status=1

echo "== tests that cover the model"
timeout 900 npx vitest run test/doctor/coherence.test.ts test/doctor/independent-gate.test.ts test/doctor/coherence-4bit.test.ts || status=1
if [ "$status" = 0 ]; then echo "after_run: all checks passed"; else echo "after_run: SOME CHECKS FAILED (see above)"; fi
exit "$status"
