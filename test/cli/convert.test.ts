// `rapid convert` writes the same MLX affine checkpoint that mlx's algorithm gives: packed weights
// equal the fixtures (quantized from the same f32 weights by the generator's mlx port), except where
// the generator nudged an exact .5 tie by one ulp (there mlx's CPU rint and Metal round disagree);
// scales and biases equal them up to the fixtures' bf16 storage; the result loads and generates.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';
import { readSafetensors, type RawTensor } from '../helpers/safetensors.js';

const root = resolve(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'rapid.js');
const fixtures = join(root, 'test', 'fixtures', 'models');
const work = mkdtempSync(join(tmpdir(), 'rapid-convert-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function tensors(dir: string): Map<string, RawTensor> {
  const all = new Map<string, RawTensor>();
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.safetensors'))) {
    for (const [k, v] of readSafetensors(join(dir, f))) all.set(k, v);
  }
  return all;
}

function floats(t: RawTensor): Float32Array {
  const b = t.data;
  if (t.dtype === 'F32') return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  if (t.dtype === 'BF16') {
    const out = new Float32Array(b.byteLength / 2);
    const u = new Uint32Array(out.buffer);
    for (let i = 0; i < out.length; i++) u[i] = b.readUInt16LE(2 * i) << 16;
    return out;
  }
  throw new Error(`unexpected dtype ${t.dtype}`);
}

function toBf16(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] = ((u[0] + 0x7fff + ((u[0] >> 16) & 1)) >>> 16) << 16;
  return f[0];
}

describe.skipIf(!nativeAvailable())('rapid convert', () => {
  it.each([
    ['qwen2', 8, 128],
    ['qwen3', 8, 64],
    ['llama', 8, 32],
    ['gemma3', 8, 32],
  ])('%s-f32 --quantize %i --group-size %i equals the q8 fixture of that family', (family, bits, group) => {
    const dst = join(work, `${family}-${bits}-${group}`);
    const r = spawnSync(process.execPath, [bin, 'convert', join(fixtures, `${family}-f32`), dst, '--quantize', String(bits), '--group-size', String(group)], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const cfg = JSON.parse(readFileSync(join(dst, 'config.json'), 'utf8')) as Record<string, { bits: number; group_size: number }>;
    expect(cfg.quantization).toMatchObject({ bits, group_size: group });
    expect(cfg.quantization_config).toEqual(cfg.quantization);

    const ours = tensors(dst);
    const theirs = tensors(join(fixtures, `${family}-q8`));
    const master = tensors(join(fixtures, `${family}-f32`));
    let ties = 0;
    let codes = 0;
    expect([...ours.keys()].sort()).toEqual([...theirs.keys()].sort());
    for (const [name, t] of theirs) {
      const o = ours.get(name)!;
      expect(o.shape, name).toEqual(t.shape);
      if (t.dtype === 'U32') {
        expect(o.dtype).toBe('U32');
        // 8-bit: one byte per code. A differing code must be an exact tie under our f32 arithmetic.
        const module = name.slice(0, -'.weight'.length);
        const w = floats(master.get(name)!);
        const sc = floats(ours.get(`${module}.scales`)!);
        const bi = floats(ours.get(`${module}.biases`)!);
        codes += o.data.length;
        for (let i = 0; i < o.data.length; i++) {
          if (o.data[i] === t.data[i]) continue;
          const g = Math.floor(i / group);
          const v = Math.fround(Math.fround(w[i] - bi[g]) / sc[g]);
          expect(Math.abs(o.data[i] - t.data[i]), `${name}[${i}]`).toBe(1);
          expect(v - Math.floor(v), `${name}[${i}] differs but is not a tie: ${v}`).toBe(0.5);
          ties++;
        }
      } else {
        const a = floats(o);
        const b = floats(t);
        for (let i = 0; i < a.length; i++) {
          const want = t.dtype === 'BF16' ? toBf16(a[i]) : a[i];
          if (want !== b[i]) expect.fail(`${name}[${i}]: ${a[i]} (bf16 ${want}) vs fixture ${b[i]}`);
        }
      }
    }
    expect(ties).toBeLessThanOrEqual(codes * 1e-4);
  });

  it('the converted 4-bit model loads and runs', () => {
    const dst = join(work, 'qwen3-4');
    expect(spawnSync(process.execPath, [bin, 'convert', join(fixtures, 'qwen3-f32'), dst, '-q', '4'], { encoding: 'utf8' }).status).toBe(0);
    const r = spawnSync(process.execPath, [bin, 'run', dst, '--prompt', 'hi', '--max-tokens', '4', '--temperature', '0', '--json'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { token_ids: number[] }).token_ids.length).toBeGreaterThan(0);
  });

  it.each([
    [['--quantize', '3'], /--quantize must be one of 4, 8/],
    [['--quantize', '4', '--group-size', '48'], /--group-size must be one of 32, 64, 128/],
  ])('rejects %j', (flags, message) => {
    const r = spawnSync(process.execPath, [bin, 'convert', join(fixtures, 'qwen2-f32'), join(work, 'never'), ...flags], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(message);
  });

  it('refuses to overwrite an existing directory', () => {
    const r = spawnSync(process.execPath, [bin, 'convert', join(fixtures, 'qwen2-f32'), work, '-q', '4'], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/destination already exists/);
  });
});
