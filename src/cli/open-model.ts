// `rapid run` and `rapid chat` open their model through src/app (local-model.ts) with the CLI's
// display: the download bar, then a spinner on a terminal while it loads. One function, so both load alike.
import { openLocalModel, type LocalModel, type LocalModelOptions } from '../app/local-model.js';
import { createProgressPrinter } from '../models/progress-printer.js';
import { withWait } from './wait-spinner.js';

export type OpenModelOptions = LocalModelOptions;
export type OpenedModel = LocalModel;

export function openCommandModel(spec: string, o: OpenModelOptions): Promise<OpenedModel> {
  return openLocalModel(spec, o, { onProgress: createProgressPrinter(process.stderr), wait: (label, load) => withWait(label, load) });
}
