// The in-process model of `rapid run` and `rapid chat`: resolved (pulled on first use, with the
// download bar), then loaded under a spinner on a terminal. One function, so both load alike.
import { samplingDefaults, type RecommendedSampling } from '../models/catalog.js';
import { createProgressPrinter } from '../models/progress-printer.js';
import { resolveModelDetailed, type ResolvedModel } from '../models/resolve-model.js';
import { openTextModel, type TextModel } from '../engine/text-model.js';
import type { KvCacheDtype, NativeDevice } from '../native/types.js';
import { withWait } from './wait-spinner.js';

export interface OpenModelOptions {
  threads?: number;
  precision: 'exact' | 'fast';
  device?: NativeDevice;
  kvCacheDtype?: KvCacheDtype;
}

export interface OpenedModel {
  resolved: ResolvedModel;
  model: TextModel;
  /** The model's generation_config under the catalog's recommendation. */
  defaults: RecommendedSampling;
}

export async function openCommandModel(spec: string, o: OpenModelOptions): Promise<OpenedModel> {
  const resolved = await resolveModelDetailed(spec, { pull: true, onProgress: createProgressPrinter(process.stderr) });
  const model = await withWait(`loading ${spec}`, () => openTextModel(resolved.dir, { threads: o.threads, precision: o.precision, device: o.device, kvCacheDtype: o.kvCacheDtype }));
  return { resolved, model, defaults: samplingDefaults(model.defaults, resolved.entry?.sampling) };
}
