// `rapid run --schema FILE` / `--json-object` through the real CLI binary on a fixture checkpoint:
// the single-sequence loop applies the grammar's mask, and the output validates.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';
import { schemaViolation } from './json-schema-check.mjs';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const model = join(root, 'test', 'fixtures', 'models', 'qwen2-q4');

function rapid(args: string[]) {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 60_000 });
}

const SCHEMA = {
  type: 'object',
  properties: { city: { enum: ['Oslo', 'Lima'] }, temp: { type: 'integer', minimum: -50, maximum: 50 }, rain: { type: 'boolean' } },
  required: ['city', 'temp', 'rain'],
  additionalProperties: false,
};

describe.skipIf(!nativeAvailable())('rapid run with a grammar', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rapid-schema-'));
  const file = join(dir, 'schema.json');
  writeFileSync(file, JSON.stringify(SCHEMA));
  const base = [model, '--prompt', 'weather', '--temperature', '0', '--precision', 'exact', '--max-tokens', '48', '--json'];

  it('--schema FILE: the output validates and finishes with stop', () => {
    const r = rapid(['run', ...base, '--schema', file]);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { text: string; finish_reason: string };
    expect(out.finish_reason).toBe('stop');
    expect(schemaViolation(SCHEMA, JSON.parse(out.text)), out.text).toBeNull();
  });

  it('--json-object: an object, or a truncated one with finish_reason length', () => {
    const r = rapid(['run', ...base, '--json-object']);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { text: string; finish_reason: string };
    expect(out.text.startsWith('{')).toBe(true);
    if (out.finish_reason === 'stop') expect(typeof JSON.parse(out.text)).toBe('object');
    else expect(out.finish_reason).toBe('length');
  });

  it('--max-tokens below the shortest valid output fails naming both; tighter budgets still validate', () => {
    const tiny = ['run', model, '--prompt', 'weather', '--temperature', '0', '--json', '--schema', file];
    const r = rapid([...tiny, '--max-tokens', '2']);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/max_tokens is 2, but the shortest output this schema allows takes \d+ tokens/);
    expect(r.stderr).toMatch(/--no-budget-close/);
    // --no-budget-close: the cut output, as before closing existed.
    const cut = rapid([...tiny, '--max-tokens', '2', '--no-budget-close']);
    expect(cut.status, cut.stderr).toBe(0);
    expect((JSON.parse(cut.stdout) as { finish_reason: string }).finish_reason).toBe('length');
    const least = Number(/takes (\d+) tokens/.exec(r.stderr)![1]);
    const closed = rapid([...tiny, '--max-tokens', String(least + 1)]);
    expect(closed.status, closed.stderr).toBe(0);
    const out = JSON.parse(closed.stdout) as { text: string };
    expect(schemaViolation(SCHEMA, JSON.parse(out.text)), out.text).toBeNull();
  });

  it('an unsupported schema fails with the construct named', () => {
    const badFile = join(dir, 'bad.json');
    writeFileSync(badFile, JSON.stringify({ type: 'object', if: {} }));
    const r = rapid(['run', ...base, '--schema', badFile]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('"if" is not supported');
  });
});
