// `rapid serve A --models-config FILE` as a user starts it (the CLI in a child process), and the
// config file's checks: every mistake names the file, the entry and the key.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseByteSize } from '../../src/cli/commands/serve.js';
import { parseModelsConfig } from '../../src/cli/models-config.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const parse = (doc: unknown) => parseModelsConfig(JSON.stringify(doc), 'models.json', parseByteSize);

describe('--models-config', () => {
  it('reads each model with its names, pin and options', () => {
    const [a, b] = parse({ models: [{ model: 'qwen3-0.6b', aliases: ['qwen', 'default'], pin: true, 'kv-cache-memory': '1GiB', 'max-num-seqs': 8, precision: 'exact', device: 'cpu', 'engine-process': 'child' }, { model: '/m/x' }] });
    expect(a).toEqual({ spec: 'qwen3-0.6b', aliases: ['qwen', 'default'], pin: true, options: { kvCacheMemory: 1024 ** 3, maxNumSeqs: 8, precision: 'exact', device: 'cpu', engineProcess: 'child' } });
    expect(b).toEqual({ spec: '/m/x', pin: false, options: {} });
  });

  it('names the file, the entry and the key of every mistake', () => {
    expect(() => parseModelsConfig('{', 'models.json', parseByteSize)).toThrow(/models.json: not valid JSON/);
    expect(() => parse([])).toThrow(/models.json: expected \{"models"/);
    expect(() => parse({ models: [] })).toThrow(/"models" is empty/);
    expect(() => parse({ models: [{ aliases: ['x'] }] })).toThrow(/models\[0\]: "model" must name a model/);
    expect(() => parse({ models: [{ model: 'a', 'kv-cache': '1GiB' }] })).toThrow(/models\[0\]\.kv-cache: unknown key; a model takes model, aliases, pin, kv-cache-memory/);
    expect(() => parse({ models: [{ model: 'a' }, { model: 'b', 'max-num-seqs': 0 }] })).toThrow(/models\[1\]\.max-num-seqs: expected a positive integer, got 0/);
    expect(() => parse({ models: [{ model: 'a', 'kv-cache-memory': 'lots' }] })).toThrow(/kv-cache-memory: expected a size/);
    expect(() => parse({ models: [{ model: 'a', precision: 'half' }] })).toThrow(/precision: expected exact or fast/);
    expect(() => parse({ models: [{ model: 'a', device: 'tpu' }] })).toThrow(/device.*auto, cpu or cuda/);
    expect(() => parse({ models: [{ model: 'a', aliases: [] }] })).toThrow(/aliases: expected a non-empty array/);
    expect(() => parse({ models: [{ model: 'a', pin: 'yes' }] })).toThrow(/pin: expected true or false/);
    expect(() => parse({ models: [{ model: 'a' }], extra: 1 })).toThrow(/unknown top-level key\(s\) extra/);
  });
});

/** `rapid serve ...` from the CLI; resolves once it logs that it serves, or with its exit and stderr. */
function serveCli(args: string[]): Promise<{ url?: string; child: ChildProcess; err: () => string; code?: number | null }> {
  const child = spawn(process.execPath, [resolve(ROOT, 'bin/rapid.js'), 'serve', '--port', '0', '--threads', '2', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => (child.kill(), fail(new Error(`rapid serve did not start in 60 s:\n${err}`))), 60_000);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /serving .* on (http:\/\/[^\s]+)\/v1/.exec(err);
      if (m) {
        clearTimeout(timer);
        ok({ url: m[1]!, child, err: () => err });
      }
    });
    child.on('exit', (code) => (clearTimeout(timer), ok({ child, err: () => err, code })));
  });
}

describe.skipIf(!nativeAvailable())('rapid serve with several models (CLI)', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rapid-multi-cli-'));
  const qwen3 = loadFixture('qwen3-f32').dir;
  const qwen2 = loadFixture('qwen2-f32').dir;
  let child: ChildProcess | undefined;
  let url = '';
  let err: () => string = () => '';

  beforeAll(async () => {
    const config = join(tmp, 'models.json');
    writeFileSync(config, JSON.stringify({ models: [{ model: qwen2, aliases: ['small', 'q2'], pin: true, 'engine-process': 'child', 'kv-cache-memory': '4MiB' }] }));
    const s = await serveCli([qwen3, '--models-config', config, '--kv-cache-memory', '4MiB', '--max-loaded-bytes', '64MiB']);
    if (!s.url) throw new Error(`rapid serve exited with ${s.code}:\n${s.err()}`);
    ({ child, url, err } = s as { child: ChildProcess; url: string; err: () => string });
  }, 90_000);
  afterAll(() => {
    child?.kill('SIGTERM');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('serves the positional model and the config\'s under their names, each loaded when asked for', async () => {
    expect(err()).toMatch(/serving 2 models on .*, at most 67.1 MB loaded.*qwen3-f32, small\|q2 \(pinned\)/);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const before = await client.models.list();
    expect(before.data.map((m) => [m.id, (m as unknown as { status: string }).status])).toEqual([
      ['qwen3-f32', 'available'],
      ['small', 'loaded'],
      ['q2', 'loaded'],
    ]);
    for (const model of ['qwen3-f32', 'small', 'q2']) {
      const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0 });
      expect(r.model).toBe(model === 'q2' ? 'small' : model);
      expect(r.choices[0]!.finish_reason).toMatch(/stop|length/);
    }
    expect((await client.models.retrieve('qwen3-f32')).id).toBe('qwen3-f32');
  });

  it('refuses --served-model-name with several models, saying what to use instead', async () => {
    const s = await serveCli([qwen3, qwen2, '--served-model-name', 'x']);
    expect(s.code).not.toBe(0);
    expect(s.err()).toMatch(/--served-model-name names one model; with several, give each its names with "aliases" in --models-config/);
  }, 60_000);
});
