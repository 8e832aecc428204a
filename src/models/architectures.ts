// Which config.json architectures `rapid run`/`serve` can run, checked right after config.json
// arrives so an unsupported model fails before gigabytes of weights are downloaded.
// The list is family-table.ts's (which mirrors native/src/models/registry.cpp); a vision-language class
// stays planned until its vision runtime lands (the same rule as the catalog's "planned" status).
import { FAMILIES } from './family-table.js';

export const RUNNABLE_ARCHITECTURES = Object.keys(FAMILIES);

export const PLANNED_ARCHITECTURES: Record<string, string> = {};

/** undefined when runnable; otherwise why not, in one sentence. */
export function unsupportedArchitecture(config: Record<string, unknown>): string | undefined {
  const archs = Array.isArray(config.architectures) ? (config.architectures as unknown[]).filter((a): a is string => typeof a === 'string') : [];
  const arch = archs[0];
  if (!arch) return undefined; // the native loader falls back to model_type; let it decide
  if (RUNNABLE_ARCHITECTURES.includes(arch)) return undefined;
  if (PLANNED_ARCHITECTURES[arch]) return `its architecture ${arch} (${PLANNED_ARCHITECTURES[arch]}) is planned, not runnable yet`;
  return `its architecture ${arch} is not supported (rapid runs ${RUNNABLE_ARCHITECTURES.join(', ')})`;
}
