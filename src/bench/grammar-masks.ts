// The grammar's own cost per engine step, without a model: R constrained rows over a synthetic
// byte-level vocabulary of Qwen2.5's size each ask next() (all at once, as the engine does), take
// an allowed token and accept it. Reports the wall time of a step's masks (per step and per row)
// and how much of it the event loop was busy.
// `node bench/run.js grammar-masks [--rows 1,8,64] [--steps 40] [--vocab 151936]`
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { GrammarService } from '../engine/grammar/grammar-service.js';
import { parseResponseFormat } from '../server/response-format.js';
import type { RequestGrammar } from '../engine/grammar/request-grammar.js';
import { median } from './median.js';
import { DEFAULT_BENCH_SCHEMA, syntheticByteLevelTokenizer } from './serving.js';

function allowed(mask: Int32Array, vocab: number, k: number): number {
  const ids: number[] = [];
  for (let w = 0; w < mask.length; w++) {
    let v = mask[w]!;
    while (v !== 0) {
      const b = 31 - Math.clz32(v & -v);
      const t = w * 32 + b;
      if (t < vocab) ids.push(t);
      v &= v - 1;
    }
  }
  return ids[k % ids.length]!;
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { rows: { type: 'string' }, steps: { type: 'string' }, vocab: { type: 'string' } } });
  const rowsList = (values.rows ?? '1,8,64').split(',').map(Number);
  const steps = Number(values.steps ?? 40);
  const vocab = Number(values.vocab ?? 151_936);
  const stop = vocab - 22;
  const service = new GrammarService({ tokenizer: syntheticByteLevelTokenizer(vocab), vocabSize: vocab, stopTokenIds: [stop] });
  const format = parseResponseFormat({ type: 'json_schema', json_schema: { name: 'bench', schema: DEFAULT_BENCH_SCHEMA, strict: true } })!;
  const t0 = performance.now();
  (await service.matcher(format)).dispose();
  process.stderr.write(`grammar ready in ${Math.round(performance.now() - t0)} ms (vocab ${vocab})\n`);
  for (const rows of rowsList) {
    const gs: RequestGrammar[] = [];
    for (let i = 0; i < rows; i++) gs.push(await service.matcher(format));
    const stepMs: number[] = [];
    let masks = 0;
    const elu0 = performance.eventLoopUtilization();
    const w0 = performance.now();
    for (let s = 0; s < steps; s++) {
      const t = performance.now();
      const nexts = await Promise.all(gs.map((g) => g.next()));
      nexts.forEach((n, i) => {
        if (n.kind !== 'mask') return;
        masks++;
        gs[i]!.accept(allowed(n.bitmask, vocab, s * 31 + i));
      });
      stepMs.push(performance.now() - t);
      if (masks === 0) break;
    }
    // The event loop's busy share over the steps: what the masks cost every other request.
    const busy = performance.eventLoopUtilization(elu0).utilization;
    const loopMs = (busy * (performance.now() - w0)) / stepMs.length;
    for (const g of gs) g.dispose();
    const med = median(stepMs);
    process.stderr.write(
      `rows ${String(rows).padStart(3)}: step masks median ${med.toFixed(2)} ms (${(med / rows).toFixed(3)} ms/row), mean ${(stepMs.reduce((a, b) => a + b, 0) / stepMs.length).toFixed(2)} ms, event loop busy ${loopMs.toFixed(2)} ms/step, ${masks} masks over ${stepMs.length} steps\n`,
    );
  }
  await (service as { close?: () => Promise<void> }).close?.();
  return 0;
}
