// `rapid serve --engine-process child` as a user runs it (the compiled CLI, its own process group):
// it serves, and Ctrl-C (SIGINT to the whole group, the engine child included) drains the request in
// flight through the child and exits 0 instead of crashing and restarting the child.
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';

const RAPID_BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'rapid.js');

describe.skipIf(!nativeAvailable())('rapid serve --engine-process child (CLI)', () => {
  it('serves, and Ctrl-C drains the in-flight request through the child and exits 0', async () => {
    const fx = loadFixture('qwen2-f32');
    const proc = spawn(process.execPath, [RAPID_BIN, 'serve', join(fx.dir), '--engine-process', 'child', '--port', '0', '--threads', '1', '--kv-cache-memory', '8MiB', '--served-model-name', 'm', '--shutdown-grace', '20'], {
      detached: true, // its own process group, as a terminal's job is
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    const exited = new Promise<number | null>((res) => proc.on('exit', (code) => res(code)));
    const url = await new Promise<string>((res, rej) => {
      proc.stderr!.on('data', (d: Buffer) => {
        stderr += d.toString();
        const m = /serving m on (http:\/\/\S+)\/v1/.exec(stderr);
        if (m) res(m[1]!);
      });
      void exited.then(() => rej(new Error(`rapid serve exited: ${stderr}`)));
    });
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'paper north silver', temperature: 0, max_tokens: 400, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read(); // the stream has started
    process.kill(-proc.pid!, 'SIGINT'); // Ctrl-C: the whole group
    let body = '';
    const dec = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      body += dec.decode(value, { stream: true });
    }
    expect(await exited).toBe(0);
    expect(body).not.toContain('"error"');
    expect(body).toMatch(/"finish_reason":"(length|stop)"/);
    expect(body).toContain('[DONE]');
    expect(stderr).not.toMatch(/engine process died/);
  });
});
