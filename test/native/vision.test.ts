// Runs the native vision suite (native/test/vision_test.cpp): every VLM fixture's tower + projector
// (Qwen2.5-VL, Qwen3-VL with DeepStack, Gemma 3 SigLIP; HF and MLX layouts, a quantized tower)
// against transformers' features, plus the encoder's input validation. Skips without g++ or fixtures.
// Builds only what the towers use (the include closure of vision/ and the test), and reuses objects
// whose inputs (source, every header it reaches, flags, compiler) are unchanged since an earlier run.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
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

const quoteIncludes = (file: string): string[] =>
  [...readFileSync(file, 'utf8').matchAll(/^\s*#include\s+"([^"]+)"/gm)].map((m) => join(src, m[1]!)).filter((h) => existsSync(h));

/** Headers a file reaches through quoted includes, transitively (sorted). */
const closures = new Map<string, string[]>();
function headerClosure(file: string): string[] {
  let hit = closures.get(file);
  if (hit === undefined) {
    const seen = new Set<string>();
    const walk = (f: string) => {
      for (const h of quoteIncludes(f)) {
        if (seen.has(h)) continue;
        seen.add(h);
        walk(h);
      }
    };
    walk(file);
    hit = [...seen].sort();
    closures.set(file, hit);
  }
  return hit;
}

/**
 * The translation units the test binary needs: the test, every vision/*.cpp, and for each header they
 * reach the .cpp files that implement it (dir/name.cpp and dir/name_*.cpp, e.g. cpu/kernels_x86.cpp).
 */
function units(): string[] {
  const out = new Set<string>([join(root, 'native', 'test', 'vision_test.cpp')]);
  for (const f of readdirSync(join(src, 'vision'))) if (f.endsWith('.cpp')) out.add(join(src, 'vision', f));
  const todo = [...out];
  for (let f = todo.pop(); f !== undefined; f = todo.pop()) {
    for (const h of headerClosure(f)) {
      const stem = basename(h).replace(/\.h$/, '');
      for (const c of readdirSync(dirname(h))) {
        const p = join(dirname(h), c);
        if (c.endsWith('.cpp') && (c === `${stem}.cpp` || c.startsWith(`${stem}_`)) && !out.has(p)) {
          out.add(p);
          todo.push(p);
        }
      }
    }
  }
  return [...out].sort();
}

// Objects keyed by everything that goes into them; survives between runs (tmpdir), written atomically.
const objCache = join(tmpdir(), 'rapid-native-test-objects');
const compilerId = spawnSync('g++', ['--version'], { encoding: 'utf8' }).stdout ?? '';
function objectKey(unit: string, flags: string[]): string {
  const h = createHash('sha256').update(compilerId).update(flags.join(' ')).update(unit).update(readFileSync(unit));
  for (const header of headerClosure(unit)) h.update(header).update(readFileSync(header));
  return h.digest('hex').slice(0, 32);
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
    const tus = units();
    mkdirSync(objCache, { recursive: true });
    const objects = tus.map((u) => join(objCache, `${basename(u, '.cpp')}-${objectKey(u, flags)}.o`));
    // Compile the units not cached yet in parallel (one process per core), then link.
    let next = 0;
    const errors: string[] = [];
    const worker = async () => {
      for (let i = next++; i < tus.length; i = next++) {
        if (existsSync(objects[i]!)) continue;
        const tmp = join(work, `${i}.o`);
        const r = await gxx([...flags, '-c', tus[i]!, '-o', tmp]);
        if (r.status !== 0) errors.push(`${relative(root, tus[i]!)}:\n${r.stderr}`);
        else renameSync(tmp, objects[i]!);
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
