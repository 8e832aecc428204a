// The one place tests load the native addon: through the project loader, so tests exercise it too.
import { loadNative } from '../../src/native/binding.js';
import type { NativeAddon } from '../../src/native/types.js';

export function addon(): NativeAddon {
  return loadNative().addon;
}
