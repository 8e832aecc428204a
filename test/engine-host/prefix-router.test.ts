// The data-parallel router: a shared prompt prefix returns to the engine that took it, unless that
// engine carries more than its bounded share; otherwise the least-loaded engine; down engines never.
import { describe, expect, it } from 'vitest';
import { LOAD_FACTOR, PrefixRouter, ROUTE_BLOCK_TOKENS, prefixBlockHashes } from '../../src/engine-host/prefix-router.js';

const prompt = (seed: number, blocks: number, tail: number[] = []) => [...Array.from({ length: blocks * ROUTE_BLOCK_TOKENS }, (_, i) => (seed * 131 + i) % 1000), ...tail];

describe('prefix router', () => {
  it('hashes full blocks, chained, salted', () => {
    const a = prefixBlockHashes(prompt(1, 3, [5, 6]));
    expect(a).toHaveLength(3);
    expect(prefixBlockHashes(prompt(1, 2))).toEqual(a.slice(0, 2)); // a prefix has the same leading hashes
    expect(prefixBlockHashes(prompt(1, 3), 'salt')[0]).not.toBe(a[0]);
    expect(prefixBlockHashes([1, 2, 3])).toEqual([]); // under one block: no affinity
  });

  it('sends a shared prefix back to its engine and new prefixes to the least loaded', () => {
    const r = new PrefixRouter();
    const up = [true, true];
    expect(r.pick(prefixBlockHashes(prompt(1, 4)), [0, 0], up)).toBe(0);
    expect(r.pick(prefixBlockHashes(prompt(2, 4)), [1, 0], up)).toBe(1); // least loaded
    // Follow-ups (longer prompts, same prefix) go where their prefix went, under light load.
    expect(r.pick(prefixBlockHashes(prompt(1, 6, [9])), [1, 1], up)).toBe(0);
    expect(r.pick(prefixBlockHashes(prompt(2, 5)), [2, 1], up)).toBe(1);
  });

  it('spills a hot prefix to another engine past the bounded share, and skips engines that are down', () => {
    const r = new PrefixRouter();
    const hot = prefixBlockHashes(prompt(7, 4));
    expect(r.pick(hot, [0, 0, 0], [true, true, true])).toBe(0);
    // Bound: LOAD_FACTOR x (open + 1) / engines; engine 0 already holds 4 of 4.
    expect(Math.ceil((LOAD_FACTOR * 5) / 3)).toBeLessThan(5);
    expect(r.pick(hot, [4, 0, 0], [true, true, true])).toBe(1);
    expect(r.pick(prefixBlockHashes(prompt(8, 4)), [0, 0, 5], [false, true, true])).toBe(1);
    expect(r.pick(hot, [0, 0], [false, false])).toBe(-1);
  });
});
