// One model as a server serves it, the single-model server and the pool alike: the model, its engine (in
// this process, a supervised child, or one child per GPU), its grammar service and prompt workers, and
// what it holds in bytes.
import { basename, resolve } from 'node:path';
import type { EngineLike } from '../engine/engine.js';
import { createTextEngine, type TextEngineOptions } from '../engine/text-engine.js';
import { grammarServiceFor, type GrammarProvider } from '../engine/grammar/grammar-service.js';
import { startEngineHost, type HostModel } from '../engine-host/engine-host.js';
import { startDataParallel } from '../engine-host/data-parallel.js';
import { openTextModel } from '../engine/text-model.js';
import type { NativeLoadOptions } from '../native/types.js';
import { servedModelFrom, type SamplingDefaults } from '../server/served-model.js';
import { servedEmbeddingsFrom } from '../server/served-embeddings.js';
import { servedVisionFrom, type ImageServeOptions } from '../server/served-vision.js';
import { PromptEncoderPool } from '../server/prompt-encoder-pool.js';
import type { PoolModel } from '../server/model-pool.js';

export interface EndpointOptions {
  load: NativeLoadOptions;
  engine: Omit<TextEngineOptions, 'log' | 'faults'>;
  /** The names clients send, id first (default: the directory name). */
  names?: readonly string[];
  acceptAnyName?: boolean;
  engineProcess?: 'child' | 'inline';
  /** Engine processes on the same model, engine i with envOf(i) (its GPU); more than one implies children. */
  dataParallel?: { engines: number; envOf(i: number): Record<string, string> };
  /** Serve /v1/embeddings with this decoder's pooled hidden states (embedding models always do). */
  embeddings?: boolean;
  recommended?: SamplingDefaults;
  images?: ImageServeOptions;
}

/** Bytes a loaded model holds: mapped weights (vision tower included) and its KV pool, host or device. */
export function heldBytes(info: HostModel['info']): number {
  return info.weightBytes + info.kvBytes;
}

/** Loads the model and starts its engine; every part started is stopped again if a later one fails. */
export async function openEndpoint(dir: string, opts: EndpointOptions, log: (line: string) => void): Promise<PoolModel & { model: HostModel }> {
  let model: HostModel;
  let engine: EngineLike;
  let grammar: GrammarProvider;
  let closeModel: () => Promise<void>;
  if (opts.dataParallel !== undefined && opts.dataParallel.engines > 1) {
    const dp = await startDataParallel(dir, { load: opts.load, engine: opts.engine }, opts.dataParallel.engines, opts.dataParallel.envOf, log);
    ({ engine, grammar } = dp);
    model = dp.hosts[0]!.model;
    closeModel = () => dp.stop();
  } else if (opts.engineProcess === 'child') {
    const host = await startEngineHost(dir, { load: opts.load, engine: opts.engine }, log);
    ({ model, engine, grammar } = host);
    closeModel = () => host.supervisor.shutdown(0);
  } else {
    const m = openTextModel(dir, opts.load);
    model = m;
    engine = createTextEngine(m, { ...opts.engine, log });
    grammar = grammarServiceFor(m.text, m.info.vocabSize);
    closeModel = async () => {
      await grammar.close?.();
      m.close();
    };
  }
  let prompts: PromptEncoderPool;
  try {
    prompts = await PromptEncoderPool.start(model.dir, { contextLength: model.info.contextLength, vision: model.vision !== null });
  } catch (err) {
    await engine.shutdown(0);
    await closeModel();
    throw err;
  }
  const names = opts.names && opts.names.length > 0 ? opts.names : [basename(resolve(dir))];
  const served = {
    ...servedModelFrom(model, names[0]!, opts.recommended, prompts),
    names,
    acceptAnyName: opts.acceptAnyName ?? false,
    vision: servedVisionFrom(model, opts.images ?? {}, prompts),
    ...servedEmbeddingsFrom(model.info, opts.embeddings === true),
  };
  let closing: Promise<void> | undefined;
  return {
    model,
    endpoint: { model: served, engine, grammar },
    bytes: heldBytes(model.info),
    close(graceMs) {
      closing ??= engine
        .shutdown(graceMs)
        .then(closeModel)
        .finally(() => prompts.close());
      return closing;
    },
  };
}
