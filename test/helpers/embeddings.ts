// The embedding references of scripts/fixtures/embedding.py (transformers last-token pooling + L2
// normalisation) and the vector arithmetic the embedding tests compare with.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const FIXTURES = join(import.meta.dirname, '..', 'fixtures');

export interface EmbeddingReference {
  texts: string[];
  models: Record<string, { ids: number[][]; embeddings: number[][] }>;
}

export const EMBEDDING_REF = JSON.parse(readFileSync(join(FIXTURES, 'embeddings', 'reference.json'), 'utf8')) as EmbeddingReference;

export function normalize(v: ArrayLike<number>): number[] {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  const n = Math.sqrt(s);
  return Array.from(v, (x) => x / n);
}

export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return d / Math.sqrt(na * nb);
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}
