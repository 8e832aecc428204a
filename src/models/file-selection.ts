// Which files of a model repo rapid needs: config, tokenizer, chat template, processor configs
// and the safetensors weights (exactly the shards the index names). Everything else is skipped.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const METADATA_FILES = new Set([
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'added_tokens.json',
  'chat_template.jinja',
  'chat_template.json',
  'preprocessor_config.json',
  'processor_config.json',
  'video_preprocessor_config.json',
]);

export const WEIGHT_INDEX = 'model.safetensors.index.json';

export interface SafetensorsIndex {
  metadata?: { total_size?: number };
  weight_map: Record<string, string>;
}

/** Shard file names an index refers to, deduplicated, in first-seen order. */
export function indexShards(index: SafetensorsIndex): string[] {
  if (!index || typeof index.weight_map !== 'object') throw new Error(`${WEIGHT_INDEX} has no weight_map`);
  return [...new Set(Object.values(index.weight_map))];
}

/**
 * Picks the needed files from a repo listing. Only top-level files: subfolders (original/, onnx/)
 * hold other formats. With an index, the shards come from the index (read later), so only the
 * index itself is picked here; `needsIndex` says so.
 */
export function selectRepoFiles(names: string[]): { files: string[]; needsIndex: boolean; missing: string[] } {
  const top = names.filter((n) => !n.includes('/'));
  const files = top.filter((n) => METADATA_FILES.has(n));
  const needsIndex = top.includes(WEIGHT_INDEX);
  if (needsIndex) files.push(WEIGHT_INDEX);
  else if (top.includes('model.safetensors')) files.push('model.safetensors');
  else files.push(...top.filter((n) => n.endsWith('.safetensors') && !n.startsWith('consolidated')));
  const missing: string[] = [];
  if (!top.includes('config.json')) missing.push('config.json');
  if (!top.includes('tokenizer.json')) missing.push('tokenizer.json');
  if (!files.some((f) => f.endsWith('.safetensors') || f === WEIGHT_INDEX)) missing.push('*.safetensors weights');
  return { files, needsIndex, missing };
}

/** What a local model directory lacks to be runnable (empty = complete). */
export function missingLocalFiles(dir: string): string[] {
  const missing: string[] = [];
  if (!existsSync(join(dir, 'config.json'))) missing.push('config.json');
  if (!existsSync(join(dir, 'tokenizer.json'))) missing.push('tokenizer.json');
  const indexPath = join(dir, WEIGHT_INDEX);
  if (existsSync(indexPath)) {
    try {
      const shards = indexShards(JSON.parse(readFileSync(indexPath, 'utf8')) as SafetensorsIndex);
      for (const s of shards) if (!existsSync(join(dir, s))) missing.push(`${s} (named in ${WEIGHT_INDEX})`);
    } catch {
      missing.push(`${WEIGHT_INDEX} (unreadable)`);
    }
  } else if (!existsSync(join(dir, 'model.safetensors'))) {
    // A single-file checkpoint may use another name; any top-level .safetensors will do.
    const hasWeights = existsSync(dir) && readdirSync(dir).some((n) => n.endsWith('.safetensors'));
    if (!hasWeights) missing.push('*.safetensors weights');
  }
  return missing;
}
