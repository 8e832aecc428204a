// `rapid run` is one request on the engine `rapid serve` runs: for the same prompt and sampling, the
// CLI's output equals the HTTP server's, greedy and seeded-sampled, on a text fixture and with an image.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app/start-server.js';
import { nativeAvailable } from '../helpers/addon.js';
import { VLM_FIXTURES, vlmFixtureReady } from '../helpers/vlm-engine.js';

const root = resolve(import.meta.dirname, '..', '..');
const TEXT = join(root, 'test', 'fixtures', 'models', 'qwen2-f32');
const VLM = join(VLM_FIXTURES, 'qwen2_5_vl-f32');
const IMAGE = join(VLM_FIXTURES, 'images', 'wide_90x60.png');
const PROMPT = 'Tell me about the sea.';

interface Answer {
  text: string;
  finishReason: string;
  completionTokens: number;
}

interface Sampling {
  temperature: number;
  seed?: number;
}

function cli(dir: string, s: Sampling, image?: string): Answer {
  const args = ['run', dir, '--prompt', PROMPT, '--max-tokens', '12', '--json', '--temperature', String(s.temperature), '--threads', '1'];
  if (s.seed !== undefined) args.push('--seed', String(s.seed));
  if (image !== undefined) args.push('--image', image);
  const r = spawnSync(process.execPath, [join(root, 'bin', 'rapid.js'), ...args], { encoding: 'utf8', timeout: 120_000 });
  expect(r.status, r.stderr).toBe(0);
  const out = JSON.parse(r.stdout) as { text: string; finish_reason: string; usage: { completion_tokens: number } };
  return { text: out.text, finishReason: out.finish_reason, completionTokens: out.usage.completion_tokens };
}

async function http(srv: RunningServer, s: Sampling, image?: string): Promise<Answer> {
  const content = image === undefined ? PROMPT : [{ type: 'image_url', image_url: { url: `data:image/png;base64,${readFileSync(image).toString('base64')}` } }, { type: 'text', text: PROMPT }];
  const res = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: 12, ...s }),
    signal: AbortSignal.timeout(60_000),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
  return { text: body.choices[0]!.message.content, finishReason: body.choices[0]!.finish_reason, completionTokens: body.usage.completion_tokens };
}

const SAMPLINGS: [string, Sampling][] = [
  ['greedy', { temperature: 0 }],
  ['seeded sampling', { temperature: 0.9, seed: 1234 }],
];

const MODELS: [string, string, string | undefined][] = [
  ['text', TEXT, undefined],
  ['an image', VLM, IMAGE],
];

describe.skipIf(!nativeAvailable()).each(MODELS)('rapid run equals rapid serve: %s', (_, dir, image) => {
  const ready = image === undefined || vlmFixtureReady(dir);
  let srv: RunningServer;
  beforeAll(async () => {
    if (ready) srv = await startServer(dir, { port: 0, threads: 1, servedModelName: 'm' });
  }, 60_000);
  afterAll(() => srv?.close(1000));

  it.skipIf(!ready).each(SAMPLINGS)('%s', async (_, s) => {
    const served = await http(srv, s, image);
    expect(served.completionTokens).toBeGreaterThan(0);
    expect(cli(dir, s, image)).toEqual(served);
  });
});
