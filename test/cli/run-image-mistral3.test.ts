// `rapid run MODEL --image FILE [--image FILE2]` through the real CLI binary on the tiny Mistral 3 fixtures
// (Pixtral tower, [IMG_BREAK]/[IMG_END] rows, YaRN text lane), f32 and MLX 4-bit: transformers' greedy tokens
// for one and two images of different sizes and for text only.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadNative } from '../../src/native/binding.js';

const bin = resolve(import.meta.dirname, '..', '..', 'bin', 'rapid.js');
const vlm = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');

function rapid(args: string[]) {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 120_000 });
}

function mistral3Ready(dir: string): boolean {
  if (!existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision?.family === 'mistral3';
    m.close();
    return ok;
  } catch {
    return false;
  }
}

interface Case {
  name: string;
  hf_messages: { role: string; content: { type: string; text?: string }[] }[];
  images: { file: string }[];
  n_tokens: number;
  greedy: number[];
}

const FIXTURES = ['mistral3-f32', 'mistral3-q4'].filter((f) => mistral3Ready(join(vlm, f)));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('rapid run --image on %s', (name) => {
  const dir = join(vlm, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: Case[] };

  it.each(['text', 'one_image', 'two_images'])('%s: greedy tokens equal transformers', (caseName) => {
    const c = ref.cases.find((x) => x.name === caseName)!;
    const prompt = c.hf_messages[0]!.content.find((p) => p.type === 'text')!.text!;
    const args = ['run', dir, '--prompt', prompt, '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json'];
    for (const im of c.images) args.push('--image', join(vlm, 'images', im.file));
    const r = rapid(args);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { token_ids: number[]; usage: { prompt_tokens: number }; images?: unknown[] };
    expect(out.usage.prompt_tokens).toBe(c.n_tokens);
    if (c.images.length > 0) expect(out.images?.length).toBe(c.images.length);
    expect(out.token_ids).toEqual(c.greedy);
  });
});
