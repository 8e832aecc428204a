// The VLM fixtures (test/fixtures/vlm/<family>-<variant>/) through the real engine, server and CLI: which
// fixtures this addon can run, their reference cases, one opened model per suite with the engines it made
// shut down after, the fixture images prepared into a chat prompt, the mid-stream join the engine tests
// share, the cases' OpenAI messages with data: URIs, and `rapid run --image` on a case.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, expect } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import { imageChatPrompt, type ImagePrompt } from '../../src/engine/image-prompt.js';
import type { MultimodalInput } from '../../src/engine/multimodal.js';
import { resolveSamplingParams, type SamplingParams } from '../../src/engine/sampling-params.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import { loadNative } from '../../src/native/binding.js';
import type { ChatMessage } from '../../src/template/chat-template.js';
import { decodeImage } from '../../src/vision/index.js';
import { collect } from '../engine/helpers.js';

export const VLM_FIXTURES = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');

/** A reference.json case as the engine, server and CLI tests read it. */
export interface VlmRefCase {
  name: string;
  hf_messages: ChatMessage[];
  input_ids: number[];
  images: { file: string; grid?: number[]; placeholder_offset: number; span_length?: number; tokens: number }[];
  position_ids?: number[][];
  rope_delta?: number;
  greedy: number[];
}

/** The fixture's reference cases, looked up by name (none when the fixture is absent: a skipped suite's lookup). */
export function vlmCases<C extends { name: string } = VlmRefCase>(dir: string): (name: string) => C {
  const path = join(dir, 'reference.json');
  const ref = (existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : { cases: [] }) as { cases: C[] };
  return (name) => ref.cases.find((c) => c.name === name)!;
}

/** True when the fixture is present and the addon here loads it with a vision tower (of `family` when given). */
export function vlmFixtureReady(dir: string, family?: string): boolean {
  if (!existsSync(join(dir, 'reference.json')) || !existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const vision = m.info().vision;
    m.close();
    return family === undefined ? vision !== undefined : vision?.family === family;
  } catch {
    return false;
  }
}

/** Greedy sampling for `n` tokens. */
export const greedyParams = (n: number): SamplingParams => resolveSamplingParams({ temperature: 0, maxTokens: n }, { maxTokens: n });

/** The case's fixture images decoded and prepared by the model's processor. */
export async function caseImages(model: TextModel, c: VlmRefCase) {
  const images = [];
  for (const im of c.images) images.push(model.vision!.prepareImage(await decodeImage(readFileSync(join(VLM_FIXTURES, 'images', im.file)))));
  return images;
}

/** rapid's own prompt for the case: its chat messages through the template, with the fixture images. */
export async function casePrompt(model: TextModel, c: VlmRefCase): Promise<ImagePrompt> {
  return imageChatPrompt(model, c.hf_messages, await caseImages(model, c));
}

/**
 * One fixture model per describe block (opened exact with a 16 MiB KV pool before the tests), and engines
 * over it (maxNumSeqs 8) that are shut down, with the model, after them.
 */
export function useVlmEngine(dir: string): { model: () => TextModel; engine: (maxBatchedTokens: number) => Engine } {
  let model: TextModel;
  const engines: Engine[] = [];
  beforeAll(() => {
    model = openTextModel(dir, { precision: 'exact', kvCacheBytes: 16 << 20 });
  });
  afterAll(async () => {
    for (const e of engines) await e.shutdown(0);
    model?.close();
  });
  return {
    model: () => model,
    engine: (maxBatchedTokens) => {
      const e = createTextEngine(model, { maxBatchedTokens, maxNumSeqs: 8 });
      engines.push(e);
      return e;
    },
  };
}

/** The prompt through engine e, greedy for 16 tokens: no error, the case's tokens, one encode per image. */
export async function expectEngineGreedy(e: Engine, p: ImagePrompt, c: VlmRefCase): Promise<void> {
  const r = await collect(e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedyParams(16) }));
  expect(r.error).toBeUndefined();
  expect(r.tokens).toEqual(c.greedy);
  expect(e.stats().encoderCache.encodes).toBe(c.images.length);
}

export interface JoinRequest {
  id: string;
  promptIds: number[];
  multimodal?: MultimodalInput;
}

/**
 * Submits the first request, the second once the engine has run 2 more steps and the third after 4, so
 * each joins the others mid-stream; returns their greedy tokens (`maxTokens` each) in that order.
 */
export async function joinMidStream(e: Engine, reqs: [JoinRequest, JoinRequest, JoinRequest], maxTokens = 16): Promise<number[][]> {
  const submit = (r: JoinRequest) =>
    collect(e.submit({ promptIds: r.promptIds, ...(r.multimodal ? { multimodal: r.multimodal } : {}), params: greedyParams(maxTokens), id: r.id }));
  const first = submit(reqs[0]);
  const s0 = e.stats().steps;
  while (e.stats().steps < s0 + 2) await new Promise((r) => setTimeout(r, 1));
  const second = submit(reqs[1]);
  while (e.stats().steps < s0 + 4) await new Promise((r) => setTimeout(r, 1));
  const third = submit(reqs[2]);
  return (await Promise.all([first, second, third])).map((r) => r.tokens);
}

type FixtureMessage = { role: string; content: string | { type: string; text?: string; image_url?: { url: string } }[] };

/** A case's OpenAI messages (reference.json `messages`) with each image file name replaced by a data: URI. */
export function withDataUris(messages: FixtureMessage[]): OpenAI.Chat.Completions.ChatCompletionMessageParam[] {
  return messages.map((m) => ({
    role: m.role,
    content:
      typeof m.content === 'string'
        ? m.content
        : m.content.map((p) =>
            p.type === 'image_url'
              ? { type: 'image_url', image_url: { url: `data:image/png;base64,${readFileSync(join(VLM_FIXTURES, 'images', p.image_url!.url)).toString('base64')}` } }
              : { type: 'text', text: p.text ?? '' },
          ),
  })) as OpenAI.Chat.Completions.ChatCompletionMessageParam[];
}

const RAPID_BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'rapid.js');

/** The real CLI binary with `args` (two minutes at most). */
export function rapidCli(args: string[]): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [RAPID_BIN, ...args], { encoding: 'utf8', timeout: 120_000 });
}

/** A reference case as `rapid run --image` reads it: the first user turn's text and the image files. */
export interface RunImageCase {
  hf_messages: { role: string; content: { type: string; text?: string }[] }[];
  images: { file: string }[];
  n_tokens: number;
  greedy: number[];
}

export interface RunJson {
  token_ids: number[];
  usage: { prompt_tokens: number };
  images?: unknown[];
  timings?: { image_encode_ms: number };
}

/**
 * `rapid run DIR --prompt TEXT [--image FILE...] --json`, greedy and exact: expects the case's prompt length,
 * one images entry per image and its greedy tokens; returns the JSON for further checks.
 */
export function expectRunImageGreedy(dir: string, c: RunImageCase): RunJson {
  const prompt = c.hf_messages[0]!.content.find((p) => p.type === 'text')!.text!;
  const args = ['run', dir, '--prompt', prompt, '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json'];
  for (const im of c.images) args.push('--image', join(VLM_FIXTURES, 'images', im.file));
  const r = rapidCli(args);
  expect(r.status, r.stderr).toBe(0);
  const out = JSON.parse(r.stdout) as RunJson;
  expect(out.usage.prompt_tokens).toBe(c.n_tokens);
  if (c.images.length > 0) expect(out.images?.length).toBe(c.images.length);
  expect(out.token_ids).toEqual(c.greedy);
  return out;
}
