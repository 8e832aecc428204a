// The golden set of the coherence gate: MODEL/golden/golden.jsonl (one item a line), its images and
// words.txt (the garbage detector's dictionary), as written by training/tiny-vlm/golden.py build.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { packageRoot } from '../../native/binding.js';

export interface GoldenItem {
  id: string;
  category: string; // fact, arith, refuse, no_image, image_<kind>, json
  prompt: string;
  image: string | null; // relative to the folder holding golden/ ("golden/g03_112x112.png")
  match: 'exact' | 'json';
  expected: unknown; // a string, or the object a json item must equal
  schema?: string; // json items: the JSON Schema file their structured output is constrained by
  absent?: string[]; // single-shape pictures: the shape kinds not in it; an answer naming one hallucinates
}

export interface GoldenSet {
  dir: string; // the golden/ folder
  items: GoldenItem[];
  words: Set<string>; // lower case
  /** Each item's schema file, parsed (json items only), by item id. */
  schemas: Map<string, unknown>;
}

/** A schema named by an item: next to golden.jsonl, in the model folder, else the package's examples/. */
function findSchema(goldenDir: string, name: string): string {
  const tried = [join(goldenDir, name), join(dirname(goldenDir), name), join(packageRoot(), 'examples', name)];
  const hit = tried.find((p) => existsSync(p));
  if (!hit) throw new Error(`golden set: schema ${name} not found (looked in ${tried.join(', ')})`);
  return hit;
}

export function loadGoldenSet(goldenDir: string): GoldenSet {
  const file = join(goldenDir, 'golden.jsonl');
  if (!existsSync(file)) throw new Error(`no golden set at ${file}`);
  const items = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim().length > 0)
    .map((l) => JSON.parse(l) as GoldenItem);
  for (const it of items) {
    if (typeof it.id !== 'string' || typeof it.prompt !== 'string' || (it.match !== 'exact' && it.match !== 'json')) {
      throw new Error(`${file}: malformed item ${JSON.stringify(it).slice(0, 120)}`);
    }
  }
  const words = new Set(
    readFileSync(join(goldenDir, 'words.txt'), 'utf8')
      .split('\n')
      .map((w) => w.trim().toLowerCase())
      .filter((w) => w.length > 0),
  );
  const schemas = new Map<string, unknown>();
  const parsed = new Map<string, unknown>();
  for (const it of items) {
    if (it.match !== 'json' || !it.schema) continue;
    if (!parsed.has(it.schema)) parsed.set(it.schema, JSON.parse(readFileSync(findSchema(goldenDir, it.schema), 'utf8')));
    schemas.set(it.id, parsed.get(it.schema));
  }
  return { dir: goldenDir, items, words, schemas };
}

/** An item's image file (absolute), or null for text-only items. */
export function goldenImagePath(set: GoldenSet, item: GoldenItem): string | null {
  return item.image === null ? null : join(dirname(set.dir), item.image);
}
