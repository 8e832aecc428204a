// Which config.json architectures `rapid run`/`serve` can run, checked right after config.json
// arrives so an unsupported model fails before gigabytes of weights are downloaded.
// The names are the native registry's (native/src/models/registry.cpp, through the addon);
// family-table.ts keeps the per-architecture metadata TS needs, and a test holds the two equal.
import { loadNative } from '../native/binding.js';

export const PLANNED_ARCHITECTURES: Record<string, string> = {};

/** The architectures the native registry loads; null when no native binary loads here (then the
 *  model load itself reports that). */
export function runnableArchitectures(): readonly string[] | null {
  try {
    return loadNative().addon.architectures();
  } catch {
    return null;
  }
}

/** undefined when runnable (or when it cannot be told here); otherwise why not, in one sentence. */
export function unsupportedArchitecture(config: Record<string, unknown>, runnable: readonly string[] | null = runnableArchitectures()): string | undefined {
  const archs = Array.isArray(config.architectures) ? (config.architectures as unknown[]).filter((a): a is string => typeof a === 'string') : [];
  const arch = archs[0];
  if (!arch || runnable === null) return undefined; // the native loader falls back to model_type; let it decide
  if (runnable.includes(arch)) return undefined;
  if (PLANNED_ARCHITECTURES[arch]) return `its architecture ${arch} (${PLANNED_ARCHITECTURES[arch]}) is planned, not runnable yet`;
  return `its architecture ${arch} is not supported (rapid runs ${runnable.join(', ')})`;
}
