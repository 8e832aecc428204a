// The embedded default model: models/tiny-vlm ships inside the package, so `rapid run` and
// `rapid serve` answer without a download. Paths resolve from the package root (src/ under vitest,
// dist/ when installed), never from the working directory.
import { join } from 'node:path';
import { packageRoot } from '../native/binding.js';

/** The catalog alias `rapid run` / `rapid serve` / `rapid doctor --coherence` use without a model. */
export const DEFAULT_MODEL = 'tiny-vlm';

/** An embedded entry's folder (catalog "embedded": "models/tiny-vlm") inside the installed package. */
export function embeddedModelDir(relative: string): string {
  return join(packageRoot(), relative);
}
