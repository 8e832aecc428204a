// `rapid run MODEL --image FILE [--image FILE2]` through the real CLI binary on the tiny VLM fixtures:
// transformers' greedy tokens for one and two images, and clear errors for a text-only model, a
// missing file, a corrupt image and --raw.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadNative } from '../../src/native/binding.js';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const vlm = join(root, 'test', 'fixtures', 'vlm');

function visionReady(dir: string): boolean {
  if (!existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision !== undefined;
    m.close();
    return ok;
  } catch {
    return false;
  }
}

export function rapid(args: string[]) {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 120_000 });
}

interface Case {
  name: string;
  hf_messages: { role: string; content: { type: string; text?: string }[] }[];
  images: { file: string }[];
  n_tokens: number;
  greedy: number[];
}

const FIXTURES = ['qwen2_5_vl-f32', 'qwen3_vl-f32', 'gemma3-f32'].filter((f) => visionReady(join(vlm, f)));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('rapid run --image on %s', (name) => {
  const dir = join(vlm, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: Case[] };

  it.each(['one_image', 'two_images'])('%s: greedy tokens equal transformers', (caseName) => {
    const c = ref.cases.find((x) => x.name === caseName)!;
    const prompt = c.hf_messages[0]!.content.find((p) => p.type === 'text')!.text!;
    const args = ['run', dir, '--prompt', prompt, '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json'];
    for (const im of c.images) args.push('--image', join(vlm, 'images', im.file));
    const r = rapid(args);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { token_ids: number[]; usage: { prompt_tokens: number }; images: unknown[]; timings: { image_encode_ms: number } };
    expect(out.usage.prompt_tokens).toBe(c.n_tokens);
    expect(out.images.length).toBe(c.images.length);
    expect(out.token_ids).toEqual(c.greedy);
    expect(out.timings.image_encode_ms).toBeGreaterThan(0);
  });

  it('without --image: the text-only prompt on the VLM gives transformers\' text greedy tokens', () => {
    const c = ref.cases.find((x) => x.name === 'text')!;
    const prompt = c.hf_messages[0]!.content.find((p) => p.type === 'text')!.text!;
    const r = rapid(['run', dir, '--prompt', prompt, '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json']);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { token_ids: number[]; usage: { prompt_tokens: number } };
    expect(out.usage.prompt_tokens).toBe(c.n_tokens);
    expect(out.token_ids).toEqual(c.greedy);
  });

  it('says what is wrong with a missing file, a corrupt image and --raw', () => {
    const missing = rapid(['run', dir, '--prompt', 'x', '--image', join(vlm, 'images', 'no-such.png')]);
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toMatch(/--image .*no-such\.png: no such file/);
    const tmp = mkdtempSync(join(tmpdir(), 'rapid-img-'));
    const bad = join(tmp, 'bad.png');
    writeFileSync(bad, 'not an image');
    const corrupt = rapid(['run', dir, '--prompt', 'x', '--image', bad]);
    expect(corrupt.status).not.toBe(0);
    expect(corrupt.stderr).toMatch(/--image .*bad\.png: image could not be read/);
    const raw = rapid(['run', dir, '--raw', '--prompt', 'x', '--image', join(vlm, 'images', 'wide_90x60.png')]);
    expect(raw.status).not.toBe(0);
    expect(raw.stderr).toMatch(/--image needs the chat template/);
  });
});

describe.skipIf(FIXTURES.length === 0)('rapid run --image on a text-only model', () => {
  it('refuses with a clear message', () => {
    const r = rapid(['run', join(root, 'test', 'fixtures', 'models', 'qwen2-f32'), '--prompt', 'x', '--image', join(vlm, 'images', 'wide_90x60.png')]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/does not accept images/);
  });
});
