// Downloads against a local fake hub: HF cache layout, no-op re-pull, resume after a dropped
// connection, corruption, offline mode, private repos, retries and timeouts.
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HubError, IntegrityError, OfflineError } from '../../src/models/errors.js';
import { hubEnv, type Env } from '../../src/models/hub-env.js';
import { pullRepo, type PullEvent } from '../../src/models/pull.js';
import { resolveModel } from '../../src/models/resolve-model.js';
import { FakeHub, fakeFile, tinyModelFiles } from '../helpers/fake-hub.js';

const REPO = 'test-org/tiny-4bit';
let hub: FakeHub;
let tmp: string;
let env: Env;

const fast = { retries: 3, retryBaseMs: 5, timeoutMs: 2000, idleTimeoutMs: 2000 };
const pull = (repo = REPO, extra: Partial<Parameters<typeof pullRepo>[1]> = {}) => pullRepo(repo, { hub: hubEnv(env), ...fast, ...extra });

beforeAll(async () => {
  hub = new FakeHub();
  await hub.start();
});
afterAll(async () => {
  await hub.stop();
});
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-pull-'));
  env = { HOME: tmp, HF_HOME: join(tmp, 'hf'), HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(tmp, 'config') };
  hub.repos.clear();
  hub.log.length = 0;
  hub.faults = {};
  hub.addRepo(REPO, tinyModelFiles());
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

function repoFolder(): string {
  return join(tmp, 'hf', 'hub', 'models--test-org--tiny-4bit');
}

describe('pull', () => {
  it('lands in the Hugging Face cache layout with only the needed files', async () => {
    const result = await pull();
    const repo = hub.repos.get(REPO)!;
    expect(result.commit).toBe(repo.commit);
    expect(result.dir).toBe(join(repoFolder(), 'snapshots', repo.commit));
    expect(readFileSync(join(repoFolder(), 'refs', 'main'), 'utf8')).toBe(repo.commit);
    const names = readdirSync(result.dir).sort();
    expect(names).toEqual(
      [
        'config.json',
        'generation_config.json',
        'model-00001-of-00002.safetensors',
        'model-00002-of-00002.safetensors',
        'model.safetensors.index.json',
        'tokenizer.json',
        'tokenizer_config.json',
      ].sort(),
    );
    for (const name of names) {
      const p = join(result.dir, name);
      expect(lstatSync(p).isSymbolicLink()).toBe(true);
      const f = repo.files.get(name)!;
      // Relative links into blobs/, named by sha256 for LFS files and git sha1 otherwise.
      expect(readlinkSync(p)).toBe(join('..', '..', 'blobs', f.lfs ? f.sha256 : f.gitSha1));
      expect(readFileSync(p).equals(f.data)).toBe(true);
    }
    expect(readdirSync(join(repoFolder(), 'blobs')).some((b) => b.endsWith('.incomplete'))).toBe(false);
    // README, .gitattributes and original/*.pth were never requested.
    expect(hub.requests((r) => /README|gitattributes|original/.test(r.path))).toEqual([]);
    expect(result.files.every((f) => f.status === 'downloaded')).toBe(true);
  });

  it('a second pull is a no-op: one info request, no file transfers', async () => {
    await pull();
    hub.log.length = 0;
    const again = await pull();
    expect(again.downloadedBytes).toBe(0);
    expect(again.files.every((f) => f.status === 'cached')).toBe(true);
    expect(hub.requests().map((r) => r.path)).toEqual([`/api/models/${REPO}/revision/main`]);
    // resolveModel on a complete cached model does not touch the network at all.
    hub.log.length = 0;
    const dir = await resolveModel(REPO, { pull: true, env });
    expect(dir).toBe(again.dir);
    expect(hub.requests()).toEqual([]);
  });

  it('resumes an interrupted download with a Range request', async () => {
    const shard = 'model-00001-of-00002.safetensors';
    hub.faults.drop = { file: shard, afterBytes: 3000, times: 1 };
    await expect(pull(REPO, { retries: 0 })).rejects.toThrow(HubError);
    const blob = join(repoFolder(), 'blobs', `${hub.repos.get(REPO)!.files.get(shard)!.sha256}.incomplete`);
    expect(statSync(blob).size).toBe(3000);

    hub.log.length = 0;
    const events: PullEvent[] = [];
    const result = await pull(REPO, { onProgress: (e) => events.push(e) });
    const cdn = hub.requests((r) => r.path.startsWith('/cdn/') && r.path.endsWith(hub.repos.get(REPO)!.files.get(shard)!.sha256));
    expect(cdn.map((r) => r.range)).toEqual(['bytes=3000-']);
    expect(events).toContainEqual(expect.objectContaining({ type: 'file-start', name: shard, resumeFrom: 3000 }));
    expect(readFileSync(join(result.dir, shard)).equals(hub.repos.get(REPO)!.files.get(shard)!.data)).toBe(true);
    expect(existsSync(blob)).toBe(false);
  });

  it('retries a dropped connection within one pull, resuming where it stopped', async () => {
    const shard = 'model-00002-of-00002.safetensors';
    hub.faults.drop = { file: shard, afterBytes: 1000, times: 2 };
    const events: PullEvent[] = [];
    const result = await pull(REPO, { onProgress: (e) => events.push(e) });
    const ranges = hub.requests((r) => r.path.startsWith('/cdn/') && r.path.includes(hub.repos.get(REPO)!.files.get(shard)!.sha256)).map((r) => r.range);
    expect(ranges).toEqual([undefined, 'bytes=1000-', 'bytes=2000-']);
    expect(events.filter((e) => e.type === 'retry')).toHaveLength(2);
    expect(readFileSync(join(result.dir, shard)).equals(hub.repos.get(REPO)!.files.get(shard)!.data)).toBe(true);
  });

  it('starts over when the server ignores Range', async () => {
    const shard = 'model-00001-of-00002.safetensors';
    hub.faults.drop = { file: shard, afterBytes: 2000, times: 1 };
    await expect(pull(REPO, { retries: 0 })).rejects.toThrow();
    hub.faults.ignoreRange = true;
    const result = await pull();
    expect(readFileSync(join(result.dir, shard)).equals(hub.repos.get(REPO)!.files.get(shard)!.data)).toBe(true);
  });

  it('detects a corrupted file (sha256 mismatch), deletes it and links nothing', async () => {
    const shard = 'model-00002-of-00002.safetensors';
    hub.faults.corrupt = { file: shard };
    const err = await pull().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IntegrityError);
    expect((err as Error).message).toMatch(/sha256 mismatch.*deleted/);
    const sha = hub.repos.get(REPO)!.files.get(shard)!.sha256;
    expect(existsSync(join(repoFolder(), 'blobs', sha))).toBe(false);
    expect(existsSync(join(repoFolder(), 'blobs', `${sha}.incomplete`))).toBe(false);
    expect(existsSync(join(repoFolder(), 'snapshots', hub.repos.get(REPO)!.commit, shard))).toBe(false);
    expect(existsSync(join(repoFolder(), 'refs', 'main'))).toBe(false);
  });

  it('detects a corrupted small file by its git blob hash', async () => {
    hub.faults.corrupt = { file: 'config.json' };
    await expect(pull()).rejects.toThrow(/config\.json: checksum mismatch/);
  });

  it('offline: a clear error for a missing model and no request reaches the hub', async () => {
    env.HF_HUB_OFFLINE = '1';
    const err = await resolveModel(REPO, { pull: true, env }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OfflineError);
    expect((err as Error).message).toMatch(/not available offline.*HF_HUB_OFFLINE=1/);
    await expect(pull()).rejects.toThrow(OfflineError);
    expect(hub.requests()).toEqual([]);
  });

  it('offline: a cached model resolves without the network', async () => {
    const first = await pull();
    hub.log.length = 0;
    env.HF_HUB_OFFLINE = '1';
    expect(await resolveModel(REPO, { pull: true, env })).toBe(first.dir);
    expect((await pull()).dir).toBe(first.dir);
    expect(hub.requests()).toEqual([]);
  });

  it('private repo: 401 without a token says to set HF_TOKEN; works with one; the CDN never sees it', async () => {
    hub.addRepo('me/secret', tinyModelFiles({ sharded: false }), { private: true });
    await expect(pull('me/secret')).rejects.toThrow(/needs authentication \(401\).*HF_TOKEN/);
    env.HF_TOKEN = 'wrong';
    await expect(pull('me/secret')).rejects.toThrow(/rejected the token in HF_TOKEN/);
    env.HF_TOKEN = hub.token;
    hub.log.length = 0;
    const result = await pull('me/secret');
    expect(existsSync(join(result.dir, 'model.safetensors'))).toBe(true);
    expect(hub.requests((r) => r.path.startsWith('/api/')).every((r) => r.authorization === `Bearer ${hub.token}`)).toBe(true);
    const cdn = hub.requests((r) => r.path.startsWith('/cdn/'));
    expect(cdn.length).toBeGreaterThan(0);
    expect(cdn.every((r) => r.authorization === undefined)).toBe(true);
  });

  it('reads the token file written by `huggingface-cli login`', async () => {
    hub.addRepo('me/secret', tinyModelFiles({ sharded: false }), { private: true });
    writeFileSync(join(tmp, 'token'), `${hub.token}\n`);
    env.HF_TOKEN_PATH = join(tmp, 'token');
    await expect(pull('me/secret')).resolves.toBeDefined();
  });

  it('unknown repo and unknown revision give specific messages', async () => {
    await expect(pull('nobody/nothing')).rejects.toThrow(/nobody\/nothing needs authentication|not found/);
    await expect(pull(REPO, { revision: 'v9' })).rejects.toThrow(/has no revision "v9"/);
  });

  it('retries 5xx with backoff, then succeeds', async () => {
    hub.faults.infoStatus = { status: 503, count: 2 };
    const events: PullEvent[] = [];
    await pull(REPO, { onProgress: (e) => events.push(e) });
    expect(events.filter((e) => e.type === 'retry').map((e) => (e as { info: { attempt: number } }).info.attempt)).toEqual([1, 2]);
  });

  it('gives up on a hung server within the timeout instead of hanging', async () => {
    hub.faults.stall = true;
    const t0 = Date.now();
    await expect(pull(REPO, { timeoutMs: 150, retries: 1 })).rejects.toThrow(/failed after 2 attempts.*no response/);
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it('refuses a repo without safetensors or tokenizer.json, naming what it ships', async () => {
    const files = new Map([
      ['config.json', fakeFile('{}')],
      ['model.Q4_K_M.gguf', fakeFile('GGUF', true)],
    ]);
    hub.addRepo('someone/gguf-only', files);
    await expect(pull('someone/gguf-only')).rejects.toThrow(/cannot be run by rapid: it has no tokenizer\.json, \*\.safetensors weights \(it ships \.gguf files\)/);
  });

  it('re-links a blob that is already present (e.g. a deleted snapshot link)', async () => {
    const first = await pull();
    rmSync(join(first.dir, 'config.json'));
    hub.log.length = 0;
    const again = await pull();
    expect(again.files.find((f) => f.name === 'config.json')?.status).toBe('linked');
    expect(hub.requests((r) => r.path.includes('/resolve/'))).toEqual([]);
  });

  it('run/serve stop before the weights when the architecture is not runnable', async () => {
    const files = tinyModelFiles();
    files.set('config.json', fakeFile(JSON.stringify({ architectures: ['SomeFutureVLForConditionalGeneration'], vision_config: {} })));
    hub.addRepo('someone/a-vlm', files);
    await expect(resolveModel('someone/a-vlm', { pull: true, env, ...fast })).rejects.toThrow(/cannot be run by rapid: its architecture SomeFutureVLForConditionalGeneration is not supported.*Nothing large was downloaded/);
    expect(hub.requests((r) => r.path.includes('.safetensors') && !r.path.endsWith('.json'))).toEqual([]);
    // `models pull` (allowPlanned) still downloads it for later.
    await expect(resolveModel('someone/a-vlm', { pull: true, allowPlanned: true, env, ...fast })).resolves.toMatch(/snapshots/);
  });

  it('HF_HUB_CACHE overrides HF_HOME', async () => {
    env.HF_HUB_CACHE = join(tmp, 'elsewhere');
    const result = await pull();
    expect(result.dir.startsWith(join(tmp, 'elsewhere', 'models--test-org--tiny-4bit'))).toBe(true);
  });
});
