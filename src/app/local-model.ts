// The in-process model of `rapid run` and `rapid chat`: resolved (pulled on first use), loaded, and
// its sampling defaults (generation_config.json first, then the catalog's recommendation). The
// command supplies how a download and the load are shown.
import { samplingDefaults, type RecommendedSampling } from '../models/catalog.js';
import type { PullEvent } from '../models/pull.js';
import { resolveModelDetailed, type ResolvedModel } from '../models/resolve-model.js';
import { openTextModel, type TextModel } from '../engine/text-model.js';
import { useDevice, type DeviceFlag } from '../native/device-index.js';
import type { KvCacheDtype } from '../native/types.js';

export interface LocalModelOptions {
  threads?: number;
  precision: 'exact' | 'fast';
  device?: DeviceFlag;
  kvCacheDtype?: KvCacheDtype;
}

export interface LocalModel {
  resolved: ResolvedModel;
  model: TextModel;
  /** The model's generation_config under the catalog's recommendation (withSamplingDefaults takes it). */
  defaults: RecommendedSampling;
}

export interface LoadDisplay {
  onProgress?: (e: PullEvent) => void;
  /** Wraps the load (a spinner on a terminal). */
  wait: <T>(label: string, load: () => T) => Promise<T>;
}

export async function openLocalModel(spec: string, o: LocalModelOptions, show: LoadDisplay): Promise<LocalModel> {
  const resolved = await resolveModelDetailed(spec, { pull: true, onProgress: show.onProgress });
  const model = await show.wait(`loading ${spec}`, () => openTextModel(resolved.dir, { threads: o.threads, precision: o.precision, device: useDevice(o.device), kvCacheDtype: o.kvCacheDtype }));
  return { resolved, model, defaults: samplingDefaults(model.defaults, resolved.entry?.sampling) };
}
