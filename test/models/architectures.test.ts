// The runnable architectures come from the native registry (the addon's architectures()); the TS
// family table keeps only metadata keyed by those names, so the two must list the same ones.
import { describe, expect, it } from 'vitest';
import { runnableArchitectures, unsupportedArchitecture } from '../../src/models/architectures.js';
import { FAMILIES } from '../../src/models/family-table.js';
import { loadNative } from '../../src/native/binding.js';

describe('architectures', () => {
  it('the native registry and the family table name the same architectures', () => {
    const native = loadNative().addon.architectures();
    expect(native.length).toBeGreaterThan(0);
    expect([...native].sort()).toEqual(Object.keys(FAMILIES).sort());
    expect(runnableArchitectures()).toEqual(native);
  });

  it('accepts a registered architecture and names the runnable ones for any other', () => {
    expect(unsupportedArchitecture({ architectures: ['Qwen2ForCausalLM'] })).toBeUndefined();
    expect(unsupportedArchitecture({ model_type: 'qwen2' })).toBeUndefined(); // no architectures: the loader decides
    const why = unsupportedArchitecture({ architectures: ['SomeFutureForCausalLM'] });
    expect(why).toMatch(/^its architecture SomeFutureForCausalLM is not supported \(rapid runs .*Qwen2ForCausalLM/);
  });

  it('without a native binary it defers to the load, which reports the missing binary', () => {
    expect(unsupportedArchitecture({ architectures: ['SomeFutureForCausalLM'] }, null)).toBeUndefined();
  });
});
