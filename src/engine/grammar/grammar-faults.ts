// Test-only faults for the grammar worker: tests import this module and set them; nothing in a
// request can (no route or option reaches it). Each makes one op throw a real wasm RuntimeError in
// the worker, which then goes through the same path as a genuine trap.

export interface GrammarFaults {
  /** Trap while compiling a schema whose JSON matches. */
  trapCompile?: (schema: string) => boolean;
  /** Trap while computing a mask for a request whose schema JSON matches. */
  trapMask?: (schema: string) => boolean;
  /** Holds a new instance back this long before it replays (makes "degraded" observable). */
  rebuildDelayMs?: number;
}

export const grammarFaults: GrammarFaults = {};
