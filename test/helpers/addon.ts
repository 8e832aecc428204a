// The one place tests load the native addon: through the project loader, so tests exercise it too.
import { loadNative } from '../../src/native/binding.js';
import type { NativeAddon } from '../../src/native/types.js';

export function addon(): NativeAddon {
  return loadNative().addon;
}

/** False where the addon is not built here: native suites skip instead of failing to load. */
export function nativeAvailable(): boolean {
  try {
    loadNative();
    return true;
  } catch {
    return false;
  }
}
