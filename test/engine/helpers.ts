// Shared pieces for engine tests: a byte-level text stream, sampling params, event collection.
import { Engine, type EngineOptions, type RequestHandle } from '../../src/engine/engine.js';
import { FakeModel, type FakeModelOptions } from '../helpers/fake-runner.js';
import type { TextStream } from '../../src/engine/detokenizer.js';
import type { EngineDone, EngineEvent } from '../../src/engine/request.js';
import { resolveSamplingParams, type SamplingInput, type SamplingParams } from '../../src/engine/sampling-params.js';

/** Token id = byte value; decodes incrementally without splitting UTF-8 characters. */
export function byteTextStream(): TextStream {
  const dec = new TextDecoder('utf-8');
  return {
    push: (t) => dec.decode(Uint8Array.of(t), { stream: true }),
    flush: () => dec.decode(),
  };
}

export function bytes(text: string): number[] {
  return [...new TextEncoder().encode(text)];
}

export function params(p: SamplingInput = {}): SamplingParams {
  return resolveSamplingParams({ temperature: 0, seed: 1, maxTokens: 16, ...p }, { maxTokens: 16 });
}

export function makeEngine(fake: FakeModelOptions = {}, opts: Partial<EngineOptions> = {}): { engine: Engine; model: FakeModel } {
  const model = new FakeModel(fake);
  const engine = new Engine({ model, newTextStream: byteTextStream, stopTokenIds: [model.opts.eosId], ...opts });
  return { engine, model };
}

export interface Collected {
  deltas: EngineEvent[];
  done?: EngineDone;
  error?: Error & { code?: string };
  tokens: number[];
  text: string;
}

export async function collect(handle: RequestHandle | AsyncIterable<EngineEvent>): Promise<Collected> {
  const events = 'events' in handle ? handle.events : handle;
  const c: Collected = { deltas: [], tokens: [], text: '' };
  try {
    for await (const e of events) {
      if (e.type === 'delta') {
        c.deltas.push(e);
        c.text += e.text;
      } else c.done = e;
    }
  } catch (err) {
    c.error = err as Error & { code?: string };
  }
  c.tokens = c.done?.tokenIds ?? [];
  return c;
}

/** Deterministic pseudo-random prompts over 'a'..'z'. */
export function randomPrompts(n: number, minLen: number, maxLen: number, seed = 1): number[][] {
  let s = seed >>> 0;
  const rnd = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  return Array.from({ length: n }, () => {
    const len = minLen + Math.floor(rnd() * (maxLen - minLen + 1));
    return Array.from({ length: len }, () => 97 + Math.floor(rnd() * 26));
  });
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
