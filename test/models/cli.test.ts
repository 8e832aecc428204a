// `rapid models` list / pull / info / rm / alias through commander, against the fake hub.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { registerModels } from '../../src/cli/commands/models.js';
import { modelInfo } from '../../src/models/model-info.js';
import { createProgressPrinter } from '../../src/models/progress-printer.js';
import type { PullEvent } from '../../src/models/pull.js';
import { FakeHub, tinyModelFiles } from '../helpers/fake-hub.js';

const ALIAS_REPO = 'mlx-community/Qwen2.5-0.5B-Instruct-4bit';
let hub: FakeHub;
let tmp: string;
const saved = { ...process.env };

async function cli(...args: string[]): Promise<{ out: string; err: string }> {
  const program = new Command('rapid').exitOverride();
  registerModels(program);
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((out += String(s)), true));
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((err += String(s)), true));
  try {
    await program.parseAsync(['node', 'rapid', ...args]);
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
  return { out, err };
}

beforeAll(async () => {
  hub = new FakeHub();
  await hub.start();
});
afterAll(async () => {
  await hub.stop();
});
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-cli-'));
  Object.assign(process.env, { HF_HOME: join(tmp, 'hf'), HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(tmp, 'config') });
  delete process.env.HF_HUB_CACHE;
  delete process.env.HF_HUB_OFFLINE;
  delete process.env.HF_TOKEN;
  hub.repos.clear();
  hub.log.length = 0;
  hub.faults = {};
  hub.addRepo(ALIAS_REPO, tinyModelFiles());
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
  process.env = { ...saved };
});

describe('rapid models', () => {
  it('lists the catalog with statuses, and marks downloads after a pull', async () => {
    let { out } = await cli('models');
    expect(out).toMatch(/qwen2\.5-0\.5b-4bit\s+0\.5B\s+text\s+4-bit\s+~278 MB\s+supported\s+-/);
    expect(out).toMatch(/qwen3-vl-4b-4bit\s+4B\s+text\+image\s+4-bit\s+~\S+ GB\s+supported/);
    expect(out).not.toMatch(/gemma-2-2b-4bit/); // retired: only with --all
    expect((await cli('models', '--all')).out).toMatch(/gemma-2-2b-4bit .*retired/);

    const pulled = await cli('models', 'pull', 'qwen2.5-0.5b', '--quiet');
    expect(pulled.out.trim()).toMatch(/models--mlx-community--Qwen2\.5-0\.5B-Instruct-4bit\/snapshots\/[0-9a-f]{40}$/);
    ({ out } = await cli('models'));
    expect(out).toMatch(/qwen2\.5-0\.5b-4bit .*supported\s+yes \d+(\.\d)? kB/);

    const json = JSON.parse((await cli('models', '--json')).out) as { cacheDir: string; catalog: { alias: string; downloaded?: { complete: boolean } }[] };
    expect(json.cacheDir).toBe(join(tmp, 'hf', 'hub'));
    expect(json.catalog.find((m) => m.alias === 'qwen2.5-0.5b-4bit')?.downloaded?.complete).toBe(true);
    expect(json.catalog.find((m) => m.alias === 'qwen3-0.6b-4bit')?.downloaded).toBeUndefined();
  });

  it('pull shows progress lines on a non-TTY stderr and says when a model is already there', async () => {
    const first = await cli('models', 'pull', 'qwen2.5-0.5b');
    expect(first.err).toMatch(/pulling mlx-community\/Qwen2\.5-0\.5B-Instruct-4bit@main \(commit [0-9a-f]{12}\)/);
    expect(first.err).toMatch(/7 files, .* to download/);
    expect(first.err).toMatch(/model-00001-of-00002\.safetensors: done/);
    expect(first.err).toMatch(/ready: .* \(downloaded .* at .*\/s\)/);
    const second = await cli('models', 'pull', 'qwen2.5-0.5b');
    expect(second.err).toMatch(/already downloaded/);
  });

  it('lists repos downloaded outside the catalog', async () => {
    hub.addRepo('someone/custom', tinyModelFiles({ sharded: false }));
    await cli('models', 'pull', 'someone/custom', '-q');
    const { out } = await cli('models');
    expect(out).toMatch(/Also in the cache[\s\S]*someone\/custom\s+yes/);
  });

  it('info reads architecture, parameters and quantization from the download', async () => {
    await cli('models', 'pull', 'qwen2.5-0.5b', '-q');
    const info = await modelInfo('qwen2.5-0.5b');
    expect(info).toMatchObject({
      source: 'cache',
      alias: 'qwen2.5-0.5b-4bit',
      architecture: 'Qwen2ForCausalLM',
      params: 36992, // packed 4- and 8-bit weights counted as their unpacked elements
      quantization: 'affine 4-bit g32 (mixed: 1 module 8-bit g32)',
      contextLength: 4096,
      modalities: ['text'],
      tiedEmbeddings: true,
    });
    expect(info.files.map((f) => f.name)).toContain('model-00002-of-00002.safetensors');
    const { out } = await cli('models', 'info', 'qwen2.5-0.5b');
    expect(out).toMatch(/architecture\s+Qwen2ForCausalLM \(qwen2\)/);
    expect(out).toMatch(/parameters\s+37K \(36,992\)/);
    expect(out).toMatch(/shape\s+hidden 64, 1 layers, 4\/2 heads, vocab 256, tied embeddings/);
  });

  it('info on a model that is not downloaded asks the hub (or uses the catalog offline)', async () => {
    const remote = await modelInfo('qwen2.5-0.5b');
    expect(remote).toMatchObject({ source: 'hub', architecture: 'Qwen2ForCausalLM', contextLength: 4096 });
    expect(remote.files.map((f) => f.name)).not.toContain('README.md');
    process.env.HF_HUB_OFFLINE = '1';
    hub.log.length = 0;
    const offline = await modelInfo('qwen3-vl-4b-4bit');
    expect(offline).toMatchObject({ source: 'catalog', status: 'supported', modalities: ['text', 'image'] });
    expect(hub.requests()).toEqual([]);
    const { out } = await cli('models', 'info', 'qwen3-vl-4b-4bit');
    expect(out).toMatch(/input\s+text \+ image/);
    expect(out).toMatch(/status\s+supported/);
  });

  it('rm deletes the repo from the cache and reports the bytes freed', async () => {
    const dir = (await cli('models', 'pull', 'qwen2.5-0.5b', '-q')).out.trim();
    expect(existsSync(dir)).toBe(true);
    const dry = await cli('models', 'rm', 'qwen2.5-0.5b', '--dry-run');
    expect(dry.out).toMatch(/would remove mlx-community\/Qwen2\.5-0\.5B-Instruct-4bit \(\d+(\.\d)? kB\)/);
    expect(existsSync(dir)).toBe(true);
    const { out } = await cli('models', 'rm', 'qwen2.5-0.5b');
    expect(out).toMatch(/^removed mlx-community\/Qwen2\.5-0\.5B-Instruct-4bit/);
    expect(existsSync(join(tmp, 'hf', 'hub', 'models--mlx-community--Qwen2.5-0.5B-Instruct-4bit'))).toBe(false);
    await expect(cli('models', 'rm', 'qwen2.5-0.5b')).rejects.toThrow(/is not downloaded/);
  });

  it('alias sets, resolves and removes user aliases', async () => {
    await cli('models', 'alias', 'tiny', 'qwen2.5-0.5b');
    expect((await cli('models', 'alias')).out).toBe('tiny\tqwen2.5-0.5b\n');
    const pulled = await cli('models', 'pull', 'tiny', '-q');
    expect(pulled.out).toMatch(/Qwen2\.5-0\.5B-Instruct-4bit/);
    await expect(cli('models', 'alias', 'broken', 'no-such-model-anywhere')).rejects.toThrow(/unknown model/);
    await cli('models', 'alias', 'tiny', '--remove');
    expect((await cli('models', 'alias')).out).toBe('');
  });
});

describe('progress printer', () => {
  it('draws a bar with bytes, speed and ETA on a TTY', () => {
    let out = '';
    let t = 0;
    const print = createProgressPrinter({ isTTY: true, columns: 100, write: (s: string) => (out += s) }, () => t);
    print({ type: 'plan', files: [{ name: 'model.safetensors', sizeBytes: 2e6, cached: false }], totalBytes: 2e6, downloadBytes: 2e6 });
    for (let i = 1; i <= 4; i++) {
      t += 500;
      print({ type: 'bytes', name: 'model.safetensors', fileBytes: i * 5e5, fileSize: 2e6, doneBytes: i * 5e5, downloadBytes: 2e6 } as PullEvent);
    }
    expect(out).toMatch(/\r\x1b\[2K\[=+>? *\]  75% 1\.5 MB\/2\.0 MB 1\.0 MB\/s ETA 0:00 model\.safetensors/);
  });
});
