// `--model M`: resolve the model (no download), load it and generate a few greedy tokens
// through the serving engine.
// Runs only after the native binary loaded cleanly in a child process.
import { formatBytes } from '../../models/format-bytes.js';
import type { Env } from '../../models/hub-env.js';
import { resolveModelDetailed } from '../../models/resolve-model.js';
import type { NativeProbe } from '../native-probe.js';
import type { CheckResult } from '../types.js';

export interface SmokeOptions {
  env?: Env;
  threads?: number;
  maxTokens?: number;
}

export async function checkSmokeTest(spec: string, probe: NativeProbe, opts: SmokeOptions = {}): Promise<CheckResult> {
  const base = { id: 'model', title: 'Model smoke test' };
  if (!probe.loaded) return { ...base, status: 'fail', finding: 'skipped: no usable native binary (see above)', fix: 'fix the native binary first' };
  let dir: string;
  try {
    dir = (await resolveModelDetailed(spec, { pull: false, env: opts.env, onWarning: () => {} })).dir;
  } catch (err) {
    const msg = (err as Error).message;
    const fix = /not downloaded/.test(msg) ? `\`rapid models pull ${spec}\` (doctor never downloads)` : 'see the message; `rapid models` lists what rapid can run';
    return { ...base, status: 'fail', finding: `${spec}: ${msg}`, fix };
  }
  const t0 = performance.now();
  try {
    const { openTextModel } = await import('../../engine/text-model.js');
    const { resolveSamplingParams } = await import('../../engine/sampling-params.js');
    const { runOneRequest } = await import('../../app/one-request.js');
    const model = openTextModel(dir, { threads: opts.threads });
    const loadMs = performance.now() - t0;
    try {
      const raw = model.template === null;
      const ids = model.encodePrompt({ prompt: raw ? 'The capital of France is' : 'Say hello in one short sentence.', raw });
      const params = resolveSamplingParams({ temperature: 0, maxTokens: opts.maxTokens ?? 16, seed: 0 }, { maxTokens: 16 });
      const { done, timings: t } = await runOneRequest(model, { promptIds: ids, params });
      const text = done.text;
      if (done.usage.completionTokens === 0) {
        return { ...base, status: 'fail', finding: `${spec}: loaded ${dir} but generated no tokens`, fix: 'report this with the output of `rapid models info`', details: { dir } };
      }
      const info = model.info;
      const details = {
        dir,
        loadMs: Math.round(loadMs),
        family: info.family,
        quantization: info.quantization,
        weightBytes: info.weightBytes,
        kvCacheDtype: info.kvCacheDtype,
        kvCacheTokens: info.numBlocks * info.blockSize,
        promptTokens: done.usage.promptTokens,
        completionTokens: done.usage.completionTokens,
        prefillTokensPerSecond: Math.round(t.prefillTokensPerSecond * 10) / 10,
        decodeTokensPerSecond: Math.round(t.decodeTokensPerSecond * 10) / 10,
        text,
      };
      const sample = text.trim().replace(/\s+/g, ' ').slice(0, 60);
      return {
        ...base,
        status: 'ok',
        finding: `${spec}: ${info.family} ${info.quantization}, ${formatBytes(info.weightBytes)} loaded in ${(loadMs / 1000).toFixed(1)} s, KV ${info.kvCacheDtype} holds ${details.kvCacheTokens} tokens; ${done.usage.completionTokens} tokens at ${details.decodeTokensPerSecond} tok/s (prefill ${details.prefillTokensPerSecond} tok/s): "${sample}"`,
        details,
      };
    } finally {
      model.close();
    }
  } catch (err) {
    return { ...base, status: 'fail', finding: `${spec}: load or generation failed: ${(err as Error).message.split('\n')[0]}`, fix: 'check `rapid models info` for the architecture; unsupported families are refused at load', details: { dir } };
  }
}
