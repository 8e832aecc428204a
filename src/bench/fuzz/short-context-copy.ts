// A temporary copy of a model directory with a short context (max_position_embeddings), so that a
// fuzzed request asking for unbounded generation (max_tokens deleted or huge) ends in seconds.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ShortContextCopy {
  dir: string;
  remove(): void;
}

export function shortContextCopy(dir: string, contextLength: number): ShortContextCopy {
  const copy = mkdtempSync(join(tmpdir(), 'rapid-fuzz-model-'));
  cpSync(dir, copy, { recursive: true });
  const path = join(copy, 'config.json');
  const config = JSON.parse(readFileSync(path, 'utf8')) as { max_position_embeddings?: number; text_config?: { max_position_embeddings?: number } };
  config.max_position_embeddings = contextLength;
  if (config.text_config) config.text_config.max_position_embeddings = contextLength;
  writeFileSync(path, JSON.stringify(config, null, 2));
  return { dir: copy, remove: () => rmSync(copy, { recursive: true, force: true }) };
}
