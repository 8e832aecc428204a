// Library entry: the engine pieces usable in-process, and the native loader's report.
export { loadNative, nativeCandidates } from './native/binding.js';
export type { LoadedNative, NativeRejection, NativeSource } from './native/binding.js';
export type * from './native/types.js';
export { resolveSamplingParams } from './engine/sampling-params.js';
export type { SamplingParams } from './engine/sampling-params.js';
export { InvalidRequestError, StepError } from './errors/request-errors.js';
export { Engine } from './engine/engine.js';
export { createTextEngine } from './engine/text-engine.js';
export { openTextModel } from './engine/text-model.js';
// One request on a fresh Engine over an opened model (what `rapid run` does).
export { runOneRequest } from './app/one-request.js';
export { InvalidCheckpointError } from './models/errors.js';
export { validateCheckpoint } from './models/validate-checkpoint.js';
export { createServer } from './server/server.js';

/** Which native binary this process loaded (CPU or CUDA variant), from where, and why others were rejected. */
export async function nativeInfo(): Promise<{ path: string; source: string; variant: string; note?: string; rejected: { path: string; reason: string }[] }> {
  const { loadNative } = await import('./native/binding.js');
  const n = loadNative();
  return { path: n.path, source: n.source, variant: n.variant, ...(n.note ? { note: n.note } : {}), rejected: n.rejected.map((r) => ({ path: r.path, reason: r.reason })) };
}
