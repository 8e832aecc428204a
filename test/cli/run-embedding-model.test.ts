// `rapid run` on an embedding model (Qwen3Model, no LM head) refuses at once and says where it serves.
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';

const root = resolve(import.meta.dirname, '..', '..');

describe.skipIf(!nativeAvailable())('rapid run on an embedding model', () => {
  it('exits 1 saying it is an embedding model and naming /v1/embeddings', () => {
    const r = spawnSync(process.execPath, [join(root, 'bin', 'rapid.js'), 'run', join(root, 'test', 'fixtures', 'models', 'qwen3-embedding-f32'), '--prompt', 'hi', '--threads', '1'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/is an embedding model .*POST \/v1\/embeddings/);
  });
});
