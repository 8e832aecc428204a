// Runs the native vision suite (native/test/vision_test.cpp): every VLM fixture's tower + projector
// (Qwen2.5-VL, Qwen3-VL with DeepStack, Gemma 3 SigLIP; HF and MLX layouts, a quantized tower)
// against transformers' features, plus the encoder's input validation. Skips without g++ or fixtures.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const fixtures = join(root, 'test', 'fixtures', 'vlm');
const hasCompiler = spawnSync('g++', ['--version']).status === 0;

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

// Every .cpp under native/src except the node addon (which needs node headers).
function sources(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (relative(src, p) !== 'addon') out.push(...sources(p));
    } else if (e.name.endsWith('.cpp')) out.push(p);
  }
  return out.sort();
}

function gxx(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((done) => {
    const child = spawn('g++', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (status) => done({ status, stderr }));
  });
}

const work = mkdtempSync(join(tmpdir(), 'rapid-vision-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe.skipIf(!hasCompiler || visionDirs.length === 0)('native vision encoders vs transformers', () => {
  it('builds warning-free and matches every fixture tower', async () => {
    const flags = ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${src}`];
    if (process.arch === 'x64') flags.push('-mavx2', '-mfma', '-mf16c');
    const units = [...sources(src), join(root, 'native', 'test', 'vision_test.cpp')];
    const objDir = join(work, 'obj');
    mkdirSync(objDir);
    const objects = units.map((_, i) => join(objDir, `${i}.o`));
    // Compile units in parallel (one process per core), then link.
    let next = 0;
    const errors: string[] = [];
    const worker = async () => {
      for (let i = next++; i < units.length; i = next++) {
        const r = await gxx([...flags, '-c', units[i]!, '-o', objects[i]!]);
        if (r.status !== 0) errors.push(`${relative(root, units[i]!)}:\n${r.stderr}`);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, availableParallelism()) }, worker));
    expect(errors.join('\n'), 'compile errors').toBe('');
    const exe = join(work, 'vision_test');
    const link = await gxx(['-pthread', ...objects, '-o', exe]);
    expect(link.status, link.stderr).toBe(0);

    const run = spawnSync(exe, [fixtures], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const m = /(\d+) vision models, (\d+) passed, 0 failed/.exec(run.stdout);
    expect(m, run.stdout).not.toBeNull();
    expect(Number(m![1])).toBe(visionDirs.length);
    // Every image of every fixture was compared.
    expect(run.stdout).toMatch(/rel err/);
  }, 900_000);
});
