// Tiny transformers fixtures under test/fixtures/models/<family>-<variant>/: reference.json + logits.f32.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const FIXTURE_ROOT = resolve(import.meta.dirname, '..', 'fixtures', 'models');

export interface RefPrompt {
  ids: number[];
  greedy: number[];
  logits_rows: number;
  logits_offset: number; // in floats
  min_margin: number;
  max_abs_logit: number;
  margins: number[];
  text?: string;
}

export interface Reference {
  family: string;
  variant: string;
  vocab_size: number;
  prompts: RefPrompt[];
  notes?: string;
}

export interface Fixture {
  name: string;
  dir: string;
  ref: Reference;
  logits: Float32Array;
}

/** Fixture dirs that are complete (reference.json and logits.f32 present), sorted by name. */
export function fixtureNames(): string[] {
  if (!existsSync(FIXTURE_ROOT)) return [];
  return readdirSync(FIXTURE_ROOT)
    .filter((d) => existsSync(join(FIXTURE_ROOT, d, 'reference.json')) && existsSync(join(FIXTURE_ROOT, d, 'logits.f32')))
    .sort();
}

export function loadFixture(name: string): Fixture {
  const dir = join(FIXTURE_ROOT, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as Reference;
  const buf = readFileSync(join(dir, 'logits.f32'));
  const logits = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  return { name, dir, ref, logits };
}

/** Reference logits row j of prompt p: [vocab]. */
export function refRow(f: Fixture, p: number, j: number): Float32Array {
  const pr = f.ref.prompts[p]!;
  const v = f.ref.vocab_size;
  return f.logits.subarray(pr.logits_offset + j * v, pr.logits_offset + (j + 1) * v);
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length mismatch ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

export function argmax(a: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[best]!) best = i;
  return best;
}
