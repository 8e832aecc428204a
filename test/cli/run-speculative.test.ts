// `rapid run --speculative ngram|off` through the real CLI binary: the same tokens either way (greedy
// and seeded sampling) on a fixture whose output repeats its prompt, and a bad mode is a clear error.
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const model = join(root, 'test', 'fixtures', 'models', 'gemma3-q4');

function rapid(args: string[]) {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 60_000 });
}

describe.skipIf(!nativeAvailable())('rapid run --speculative', () => {
  const prompt = 'one two three four five six one two three four five six one two three four';
  it.each([['0'], ['0.8']])('temperature %s: the same tokens with ngram drafts and without', (t) => {
    const ids = (mode: string) => {
      const r = rapid(['run', model, '--raw', '--prompt', prompt, '--temperature', t, '--seed', '5', '--max-tokens', '48', '--json', '--speculative', mode]);
      expect(r.status, r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as { token_ids: number[] }).token_ids;
    };
    const off = ids('off');
    expect(off.length).toBeGreaterThan(0);
    expect(ids('ngram')).toEqual(off);
  });
  it('names the modes when given another', () => {
    const r = rapid(['run', model, '--prompt', 'x', '--speculative', 'fast']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/--speculative must be ngram or off, got "fast"/);
  });
});
