// The in-process model of `rapid run` and `rapid chat`: resolved (pulled on first use, with the
// download bar), then loaded under a spinner on a terminal. One function, so both load alike.
import { samplingDefaults, type RecommendedSampling } from '../models/catalog.js';
import { createProgressPrinter } from '../models/progress-printer.js';
import { resolveModelDetailed, type ResolvedModel } from '../models/resolve-model.js';
import { openTextModel, type TextModel } from '../engine/text-model.js';
import type { DeviceFlag } from '../native/device-index.js';
import { useDevice } from './options.js';
import { withWait } from './wait-spinner.js';

export interface OpenModelOptions {
  threads?: number;
  precision: 'exact' | 'fast';
  device?: DeviceFlag;
}

export interface OpenedModel {
  resolved: ResolvedModel;
  model: TextModel;
  /** The model's generation_config under the catalog's recommendation. */
  defaults: RecommendedSampling;
}

export async function openCommandModel(spec: string, o: OpenModelOptions): Promise<OpenedModel> {
  const resolved = await resolveModelDetailed(spec, { pull: true, onProgress: createProgressPrinter(process.stderr) });
  const device = useDevice(o.device);
  const model = await withWait(`loading ${spec}`, () => openTextModel(resolved.dir, { threads: o.threads, precision: o.precision, device }));
  return { resolved, model, defaults: samplingDefaults(model.defaults, resolved.entry?.sampling) };
}
