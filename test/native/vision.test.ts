// Runs the native vision suite (native/test/vision_test.cpp): every VLM fixture's tower + projector
// (Qwen2.5-VL, Qwen3-VL with DeepStack, Gemma 3 SigLIP; HF and MLX layouts, a quantized tower)
// against transformers' features, plus the encoder's input validation. Skips without g++ or fixtures.
// Builds only what the towers use (the include closure of vision/ and the test), with the native suites'
// object cache (test/helpers/native-suite.ts).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildNativeSuite, hasCompiler, sourceClosure } from '../helpers/native-suite.js';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const fixtures = join(root, 'test', 'fixtures', 'vlm');

// Model dirs whose checkpoint has a vision tower and a reference to compare with.
const visionDirs = existsSync(fixtures)
  ? readdirSync(fixtures).filter((d) => {
      const dir = join(fixtures, d);
      if (!existsSync(join(dir, 'reference.json')) || !existsSync(join(dir, 'model.safetensors'))) return false;
      if (!existsSync(join(dir, 'config.json'))) return false;
      const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { vision_config?: unknown };
      return cfg.vision_config !== undefined;
    })
  : [];

/** The sources the test binary needs besides the test: every vision/*.cpp and what they and the test reach. */
function sources(): string[] {
  const test = join(root, 'native', 'test', 'vision_test.cpp');
  const towers = readdirSync(join(src, 'vision')).filter((f) => f.endsWith('.cpp')).map((f) => join(src, 'vision', f));
  return [...towers, ...sourceClosure([test, ...towers])].sort();
}

const work = mkdtempSync(join(tmpdir(), 'rapid-vision-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe.skipIf(!hasCompiler || visionDirs.length === 0)('native vision encoders vs transformers', () => {
  it('builds warning-free and matches every fixture tower', () => {
    const exe = buildNativeSuite('vision_test', sources(), work, 'g++', process.arch === 'x64' ? ['-mavx2', '-mfma', '-mf16c'] : []);
    const run = spawnSync(exe, [fixtures], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const m = /(\d+) vision models, (\d+) passed, 0 failed/.exec(run.stdout);
    expect(m, run.stdout).not.toBeNull();
    expect(Number(m![1])).toBe(visionDirs.length);
    // Every image of every fixture was compared.
    expect(run.stdout).toMatch(/rel err/);
  }, 900_000);
});
