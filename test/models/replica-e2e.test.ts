// A user's first minutes with the two smallest catalog models, at full size: replicas built by
// scripts/replicas/make-replica.mjs, served by the fake hub with their repository's file list, then
// `rapid models pull`, `rapid run` and `rapid serve` + a json_schema chat completion, as child processes.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firstAnswer, RAPID_BIN, runCli, serveCli } from '../../src/bench/replica-steps.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FakeHub, fakeFile, type FakeFile } from '../helpers/fake-hub.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const STEP_MS = 120_000;

const catalog = JSON.parse(readFileSync(join(ROOT, 'src/models/catalog.json'), 'utf8')) as { models: { alias: string; repo: string }[] };
const repoOf = (alias: string): string => catalog.models.find((m) => m.alias === alias)!.repo;

/** The replica's files as the hub lists them; LFS as its .gitattributes says (weights, tokenizer.json). */
function repoFiles(dir: string): Map<string, FakeFile> {
  const files = new Map<string, FakeFile>();
  for (const name of readdirSync(dir)) files.set(name, fakeFile(readFileSync(join(dir, name)), name.endsWith('.safetensors') || name === 'tokenizer.json'));
  return files;
}

describe.skipIf(!nativeAvailable()).each(['qwen2.5-0.5b-4bit', 'qwen3-0.6b-4bit'])('full-size replica of %s through the fake hub', (alias) => {
  const tmp = mkdtempSync(join(tmpdir(), 'rapid-replica-'));
  const replica = join(tmp, 'replica');
  const hub = new FakeHub();
  let env: NodeJS.ProcessEnv = {};

  beforeAll(async () => {
    const made = spawnSync(process.execPath, [join(ROOT, 'scripts/replicas/make-replica.mjs'), alias, '--out', replica], { encoding: 'utf8', timeout: STEP_MS });
    if (made.status !== 0) throw new Error(`make-replica ${alias} failed:\n${made.stderr}`);
    hub.addRepo(repoOf(alias), repoFiles(replica));
    await hub.start();
    env = { ...process.env, HF_HOME: join(tmp, 'hf'), HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(tmp, 'config'), RAPID_DEVICE: 'cpu' };
    for (const k of ['HF_HUB_CACHE', 'HF_HUB_OFFLINE', 'HF_TOKEN', 'RAPID_API_KEY']) delete env[k];
  }, STEP_MS);
  afterAll(async () => {
    await hub.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('pulls the repository into the cache: the files rapid needs, byte for byte', async () => {
    const r = await runCli(RAPID_BIN, ['models', 'pull', alias], env, STEP_MS);
    expect(r.code, r.err).toBe(0);
    const [, org, name] = /^([^/]+)\/(.+)$/.exec(repoOf(alias))!;
    const snaps = join(tmp, 'hf', 'hub', `models--${org}--${name}`, 'snapshots');
    const [commit] = readdirSync(snaps);
    const snap = join(snaps, commit!);
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'model.safetensors.index.json', 'model.safetensors']) {
      expect(existsSync(join(snap, f)), f).toBe(true);
      expect(readFileSync(join(snap, f)).equals(readFileSync(join(replica, f))), f).toBe(true);
    }
    // side files the loader does not read stay on the hub
    expect(existsSync(join(snap, 'README.md'))).toBe(false);
    expect(hub.requests((q) => q.path.endsWith('/model.safetensors')).length).toBeGreaterThan(0);
  }, STEP_MS);

  it('answers `rapid run` from the cache with a finish reason and a token count', async () => {
    const before = hub.requests((q) => q.path.includes('/resolve/') || q.path.startsWith('/cdn/')).length;
    const r = await runCli(RAPID_BIN, ['run', alias, '-p', 'Name a colour.', '-n', '6', '-t', '0', '--threads', '2', '--json'], env, STEP_MS);
    expect(r.code, r.err).toBe(0);
    const res = JSON.parse(r.out) as { text: string; finish_reason: string; usage: { prompt_tokens: number; completion_tokens: number } };
    expect(typeof res.text).toBe('string');
    expect(['length', 'stop']).toContain(res.finish_reason);
    expect(res.usage.completion_tokens).toBeGreaterThan(0);
    expect(res.usage.completion_tokens).toBeLessThanOrEqual(6);
    expect(res.usage.prompt_tokens).toBeGreaterThan(5); // the real chat template around the prompt
    expect(hub.requests((q) => q.path.includes('/resolve/') || q.path.startsWith('/cdn/')).length).toBe(before); // no re-download
  }, STEP_MS);

  it('serves a json_schema chat completion whose output parses and matches', async () => {
    const s = await serveCli([alias, '--threads', '2'], env, STEP_MS);
    try {
      expect(s.url, s.err()).toBeDefined();
      // firstAnswer throws unless the content parses and matches the schema (an enum colour, an integer 0-9)
      await expect(firstAnswer(s.url!, alias, false, STEP_MS)).resolves.toMatch(/^json \{"colour":"(red|green|blue)","count":\d\}$/);
    } finally {
      s.child.kill('SIGTERM');
    }
  }, STEP_MS * 2);
});
