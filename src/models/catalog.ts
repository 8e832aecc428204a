// The built-in alias catalog (catalog.json): loaded once, validated, and looked up by alias.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { packageRoot } from '../native/binding.js';

export type ModelStatus = 'supported' | 'planned' | 'retired';
export type Modality = 'text' | 'image';

export interface RecommendedSampling {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repetitionPenalty?: number;
}

/** Sampling defaults: the model's own generation_config first, the catalog's recommendation for the rest. */
export function samplingDefaults(own: { temperature?: number; topP?: number; topK?: number }, recommended: RecommendedSampling = {}): RecommendedSampling {
  return {
    temperature: own.temperature ?? recommended.temperature,
    topP: own.topP ?? recommended.topP,
    topK: own.topK ?? recommended.topK,
    minP: recommended.minP,
    repetitionPenalty: recommended.repetitionPenalty,
  };
}

export interface CatalogEntry {
  alias: string;
  aka?: string[];
  repo: string;
  embedded?: string; // a folder inside the package (e.g. "models/tiny-vlm"): resolved locally, never pulled
  family: string;
  params: string;
  modalities: Modality[];
  quantization: string;
  sizeBytes: number;
  contextLength: number;
  sampling?: RecommendedSampling;
  status: ModelStatus;
  reason?: string; // why planned/retired
  replacement?: string; // alias to use instead
  description: string;
}

interface CatalogFile {
  version: number;
  models: CatalogEntry[];
}

let cached: CatalogEntry[] | undefined;

/** catalog.json sits next to this module in src/; a build may copy it next to the compiled file. */
function catalogPath(): string {
  const beside = fileURLToPath(new URL('./catalog.json', import.meta.url));
  if (existsSync(beside)) return beside;
  return join(packageRoot(), 'src', 'models', 'catalog.json');
}

export function loadCatalog(): CatalogEntry[] {
  if (cached) return cached;
  const path = catalogPath();
  const data = JSON.parse(readFileSync(path, 'utf8')) as CatalogFile;
  const seen = new Set<string>();
  for (const m of data.models) {
    for (const name of [m.alias, ...(m.aka ?? [])]) {
      const key = name.toLowerCase();
      if (seen.has(key)) throw new Error(`${path}: alias "${name}" is defined twice`);
      seen.add(key);
    }
    if (!/^[^/\s]+\/[^/\s]+$/.test(m.repo)) throw new Error(`${path}: ${m.alias}: repo "${m.repo}" is not org/name`);
    if (m.status !== 'supported' && !m.reason) throw new Error(`${path}: ${m.alias} is ${m.status} but gives no reason`);
  }
  cached = data.models;
  return cached;
}

/** Entry whose alias or aka equals `name` (case-insensitive). */
export function findAlias(name: string): CatalogEntry | undefined {
  const key = name.toLowerCase();
  return loadCatalog().find((m) => m.alias.toLowerCase() === key || (m.aka ?? []).some((a) => a.toLowerCase() === key));
}

/** Entry for a hub repo id (case-insensitive, like the hub). */
export function findRepo(repo: string): CatalogEntry | undefined {
  const key = repo.toLowerCase();
  return loadCatalog().find((m) => m.repo.toLowerCase() === key);
}

/** Every name a user may type: aliases and their alternatives. */
export function catalogNames(): string[] {
  return loadCatalog().flatMap((m) => [m.alias, ...(m.aka ?? [])]);
}
