// Hub downloads honour HTTP(S)_PROXY and NO_PROXY: a real forward proxy on loopback counts what
// goes through it, in-process and through `rapid models pull` in a child process.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { hubEnv, type Env } from '../../src/models/hub-env.js';
import { pullRepo } from '../../src/models/pull.js';
import { FakeHub, tinyModelFiles } from '../helpers/fake-hub.js';
import { ForwardProxy } from '../helpers/forward-proxy.js';

const REPO = 'test-org/tiny-4bit';
const fast = { retries: 1, retryBaseMs: 5, timeoutMs: 5000, idleTimeoutMs: 5000 };
let hub: FakeHub;
let proxy: ForwardProxy;
let tmp: string;

beforeAll(async () => {
  hub = new FakeHub();
  await hub.start();
  hub.addRepo(REPO, tinyModelFiles());
});
afterAll(async () => {
  await hub.stop();
});
// A fresh proxy (a new URL) per test: a dispatcher keeps its tunnels open across pulls.
beforeEach(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-proxy-'));
  proxy = new ForwardProxy();
  await proxy.start();
  hub.log.length = 0;
});
afterEach(async () => {
  await proxy.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const baseEnv = (): Env => ({ HOME: tmp, HF_HOME: join(tmp, 'hf'), HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(tmp, 'config') });
const hubHost = () => new URL(hub.url).host;

describe('downloads through a proxy', () => {
  it('HTTP_PROXY / HTTPS_PROXY: every hub request goes through the proxy', async () => {
    const result = await pullRepo(REPO, { hub: hubEnv({ ...baseEnv(), HTTP_PROXY: proxy.url, HTTPS_PROXY: proxy.url }), ...fast });
    expect(readdirSync(result.dir)).toContain('config.json');
    expect(hub.log.length).toBeGreaterThan(0);
    expect(proxy.seen.length).toBeGreaterThan(0);
    // The hub and its CDN (a second port) are both reached through the proxy.
    expect(proxy.seen).toContain(hubHost());
    expect(proxy.seen.every((h) => h.startsWith('127.0.0.1:'))).toBe(true);
  });

  it('lower-case http_proxy works too', async () => {
    await pullRepo(REPO, { hub: hubEnv({ ...baseEnv(), http_proxy: proxy.url }), ...fast });
    expect(proxy.seen).toContain(hubHost());
  });

  it('NO_PROXY=127.0.0.1 bypasses the proxy', async () => {
    const result = await pullRepo(REPO, { hub: hubEnv({ ...baseEnv(), HTTP_PROXY: proxy.url, HTTPS_PROXY: proxy.url, NO_PROXY: '127.0.0.1' }), ...fast });
    expect(readdirSync(result.dir)).toContain('config.json');
    expect(hub.log.length).toBeGreaterThan(0);
    expect(proxy.seen).toEqual([]);
  });

  it('`rapid models pull` reads the proxy variables from its environment', async () => {
    const run = (extra: Env) =>
      new Promise<{ code: number | null; err: string }>((resolve) => {
        const child = spawn(process.execPath, ['bin/rapid.js', 'models', 'pull', REPO], { env: { PATH: process.env.PATH, ...baseEnv(), ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
        let err = '';
        child.stderr.on('data', (d: Buffer) => (err += d.toString()));
        child.stdout.resume();
        child.on('close', (code) => resolve({ code, err }));
      });
    const viaProxy = await run({ HTTPS_PROXY: proxy.url, HTTP_PROXY: proxy.url });
    expect(viaProxy.err).not.toMatch(/error/i);
    expect(viaProxy.code).toBe(0);
    expect(proxy.seen.length).toBeGreaterThan(0);
    proxy.seen.length = 0;
    rmSync(join(tmp, 'hf'), { recursive: true, force: true });
    const direct = await run({ HTTPS_PROXY: proxy.url, HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1,localhost' });
    expect(direct.code).toBe(0);
    expect(proxy.seen).toEqual([]);
  });
});
