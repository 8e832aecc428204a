// User aliases: <rapid config dir>/aliases.json maps a name to a repo ("org/name[@rev]"), a local
// directory, or a built-in alias, e.g. {"coder": "mlx-community/Qwen2.5-Coder-7B-Instruct-4bit"}.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ModelError } from './errors.js';
import { rapidConfigDir, type Env } from './hub-env.js';

export function userAliasesPath(env: Env = process.env): string {
  return join(rapidConfigDir(env), 'aliases.json');
}

export function readUserAliases(env: Env = process.env): Record<string, string> {
  const path = userAliasesPath(env);
  if (!existsSync(path)) return {};
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ModelError(`${path} is not valid JSON (${(err as Error).message}); fix or delete it`);
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new ModelError(`${path} must be a JSON object of "name": "org/repo" entries`);
  }
  const out: Record<string, string> = {};
  for (const [name, target] of Object.entries(data as Record<string, unknown>)) {
    if (typeof target !== 'string' || target.trim() === '') throw new ModelError(`${path}: alias "${name}" must map to a non-empty string`);
    out[name] = target.trim();
  }
  return out;
}

export function writeUserAliases(aliases: Record<string, string>, env: Env = process.env): string {
  const path = userAliasesPath(env);
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(aliases, null, 2)}\n`);
  renameSync(tmp, path);
  return path;
}
