// The embedded default model: `rapid run` / `rapid serve` without a model argument use
// models/tiny-vlm from the package root (not the working directory), `rapid models` lists it as
// embedded, and the docs' (docs/cli.md) `rapid run --image examples/shapes.png --schema ...` example answers
// schema-valid JSON. Runs the real CLI binary (dist/, compiled by pretest) from a foreign cwd.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_MODEL } from '../../src/models/default-model.js';
import { listModels } from '../../src/models/list-models.js';
import { resolveModelDetailed } from '../../src/models/resolve-model.js';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const modelDir = join(root, 'models', 'tiny-vlm');
const ready = existsSync(join(modelDir, 'model.safetensors')) && existsSync(join(root, 'dist', 'cli', 'index.js'));

describe('the embedded default model', () => {
  it('tiny-vlm (and "default") resolve to models/tiny-vlm in the package, never to a download', async () => {
    for (const spec of [DEFAULT_MODEL, 'default', 'embedded/tiny-vlm']) {
      const r = await resolveModelDetailed(spec, { pull: false, env: { HF_HUB_OFFLINE: '1' } });
      expect(r.dir).toBe(modelDir);
      expect(r.source).toBe('local');
      expect(r.entry?.sampling).toEqual({ temperature: 0 });
    }
  });

  it('`rapid models` lists it as the embedded model', () => {
    const row = listModels({ env: { HF_HOME: join(tmpdir(), 'rapid-no-cache') } }).catalog.find((m) => m.alias === DEFAULT_MODEL);
    expect(row).toMatchObject({ alias: 'tiny-vlm', embedded: true, status: 'supported', modalities: ['text', 'image'] });
  });
});

describe.skipIf(!ready)('rapid run without a model argument', () => {
  const cwd = mkdtempSync(join(tmpdir(), 'rapid-default-'));
  afterAll(() => rmSync(cwd, { recursive: true, force: true }));
  const run = (args: string[]) => spawnSync(process.execPath, [bin, 'run', ...args], { cwd, encoding: 'utf8', timeout: 120_000 });

  it('answers a text prompt with the embedded model', () => {
    const r = run(['--prompt', 'What is the capital of France?', '--json']);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { text: string; finish_reason: string };
    expect(out.text).toBe('Paris');
    expect(out.finish_reason).toBe('stop');
  });

  it('the docs example: --image examples/shapes.png --schema examples/shape.schema.json', () => {
    const schemaFile = join(root, 'examples', 'shape.schema.json');
    const r = run(['--image', join(root, 'examples', 'shapes.png'), '--schema', schemaFile, '--prompt', 'Describe the image as JSON.']);
    expect(r.status, r.stderr).toBe(0);
    const value = JSON.parse(r.stdout) as { count: number; shapes: unknown[] };
    const validate = new Ajv().compile(JSON.parse(readFileSync(schemaFile, 'utf8')) as object);
    expect(validate(value), JSON.stringify(validate.errors)).toBe(true);
    expect(value.count).toBe(3); // examples/shapes.png holds three shapes
    // The catalog recommends greedy decoding for the embedded model: the same answer every time.
    expect(run(['--image', join(root, 'examples', 'shapes.png'), '--schema', schemaFile, '--prompt', 'Describe the image as JSON.']).stdout).toBe(r.stdout);
  });
});
