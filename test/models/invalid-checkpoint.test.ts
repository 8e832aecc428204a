// Invalid model directories through every door: the library (a typed InvalidCheckpointError) and the CLI
// (`rapid run`, `rapid serve`, `rapid models info`: exit 1 with the message, no signal, no stack trace).
// The cases: num_attention_heads 0 (was SIGFPE), num_hidden_layers 1 on a 2-layer checkpoint
// (loaded silently), a negative layer count (leaked "cannot create std::vector larger than max_size()").
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openTextModel } from '../../src/engine/text-model.js';
import { InvalidCheckpointError } from '../../src/models/errors.js';
import { inspectModelDir } from '../../src/models/model-info.js';
import { validateCheckpoint } from '../../src/models/validate-checkpoint.js';
import { copyDir } from './checkpoint-corruptions.js';

const ROOT = resolve(import.meta.dirname, '..', 'fixtures');
const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'rapid.js');
const temps: string[] = [];
afterAll(() => {
  for (const t of temps) rmSync(t, { recursive: true, force: true });
});

function corrupt(fixture: string, edit: (cfg: Record<string, unknown>) => void): string {
  const dir = mkdtempSync(join(tmpdir(), 'rapid-invalid-'));
  temps.push(dir);
  copyDir(join(ROOT, fixture), dir);
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  edit(cfg);
  rmSync(join(dir, 'config.json'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}

const CASES: { name: string; fixture: string; edit: (c: Record<string, unknown>) => void; message: RegExp }[] = [
  { name: 'num_attention_heads 0', fixture: 'models/qwen2-f32', edit: (c) => { c.num_attention_heads = 0; }, message: /num_attention_heads is 0: expected an integer in \[1, 1024\]/ },
  { name: 'num_hidden_layers one short', fixture: 'models/qwen3-q4', edit: (c) => { c.num_hidden_layers = 1; }, message: /num_hidden_layers is 1 but the checkpoint has 2 layers \(model\.layers\.1\.\* present\)/ },
  { name: 'negative layer count', fixture: 'models/gemma3-q4', edit: (c) => { c.num_hidden_layers = -3; }, message: /num_hidden_layers is -3/ },
  { name: 'vision heads 0', fixture: 'vlm/gemma4-moe-q4', edit: (c) => { (c.vision_config as Record<string, unknown>).num_key_value_heads = 0; }, message: /vision_config\.num_key_value_heads is 0/ },
  { name: 'kv heads not dividing heads', fixture: 'vlm/qwen3_vl-q4', edit: (c) => { (c.text_config as Record<string, unknown>).num_key_value_heads = 3; }, message: /text_config\.num_attention_heads \d+ is not a multiple of text_config\.num_key_value_heads 3/ },
];

describe('invalid checkpoints: library', () => {
  for (const c of CASES) {
    it(`${c.name}: openTextModel throws InvalidCheckpointError naming the field`, () => {
      const dir = corrupt(c.fixture, c.edit);
      expect(() => openTextModel(dir, { threads: 1 })).toThrow(InvalidCheckpointError);
      expect(() => validateCheckpoint(dir)).toThrow(c.message);
      expect(() => inspectModelDir(dir)).toThrow(c.message);
    });
  }

  it('every fixture validates', () => {
    for (const f of ['models/qwen2-q8', 'models/llama-bf16', 'vlm/gemma4-e-f32', 'vlm/qwen2_5_vl-q8v', 'vlm/mistral3-f32', 'vlm/qwen3_vl_moe-f32'])
      expect(validateCheckpoint(join(ROOT, f)).arch).toMatch(/For/);
  });
});

describe('invalid checkpoints: CLI', () => {
  const rapid = (args: string[]): ReturnType<typeof spawnSync> => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 60_000 });
  const clean = (r: ReturnType<typeof spawnSync>, message: RegExp): void => {
    expect(r.signal).toBeNull();
    expect(r.status).toBe(1);
    expect(String(r.stderr)).toMatch(message);
    expect(String(r.stderr)).not.toMatch(/\n\s+at |vector::|std::/); // no stack trace, no C++ internals
  };

  it('rapid run, rapid models info and rapid serve exit 1 with the message (num_attention_heads 0)', () => {
    const c = CASES[0] as (typeof CASES)[number];
    const dir = corrupt(c.fixture, c.edit);
    clean(rapid(['run', dir, '--prompt', 'hi', '--max-tokens', '1']), c.message);
    clean(rapid(['models', 'info', dir]), c.message);
    clean(rapid(['serve', dir, '--port', '0']), c.message);
  });

  it('rapid run on a one-layer-short config names num_hidden_layers', () => {
    const c = CASES[1] as (typeof CASES)[number];
    clean(rapid(['run', corrupt(c.fixture, c.edit), '--prompt', 'hi', '--max-tokens', '1']), c.message);
  });
});
