// bench:cpu's sampling options: out-of-range values are refused with a message naming the option (a valid run
// loads a checkpoint and is exercised by `npm run bench:cpu`, not here).
import { describe, expect, it } from 'vitest';
import { main } from '../../src/bench/cpu.js';

describe('bench:cpu options', () => {
  it('refuses a temperature below 0 and a top-p outside (0, 1]', async () => {
    await expect(main(['--temperature=-1'])).rejects.toThrow(/--temperature must be a number >= 0, got -1/);
    await expect(main(['--temperature', 'warm'])).rejects.toThrow(/--temperature/);
    await expect(main(['--top-p', '0'])).rejects.toThrow(/--top-p must be a number in \(0, 1\], got 0/);
    await expect(main(['--top-p', '1.5'])).rejects.toThrow(/--top-p must be a number in \(0, 1\], got 1.5/);
  });
});
