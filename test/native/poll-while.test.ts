import { describe, expect, it } from 'vitest';
import { pollWhile } from '../../src/native/poll-while.js';

const immediates = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Immediate').length;
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('pollWhile', () => {
  it('polls while the work is pending, lets timers run, and stops once it settles', async () => {
    let resolve!: (v: number) => void;
    const work = new Promise<number>((r) => (resolve = r));
    const polled = pollWhile(work);
    expect(polled).toBe(work);
    let polls = 0;
    // The poll chain is live: an Immediate is queued at every turn while the work is pending.
    for (let i = 0; i < 5; i++) {
      await tick();
      if (immediates() > 0) polls++;
    }
    expect(polls).toBe(5);
    // Timers still fire between polls.
    await new Promise((r) => setTimeout(r, 5));
    resolve(42);
    await expect(polled).resolves.toBe(42);
    await tick();
    await tick();
    expect(immediates()).toBe(0);
  });

  it('hands a rejection through unchanged and stops polling', async () => {
    const err = new Error('step failed');
    let reject!: (e: Error) => void;
    const work = new Promise<number>((_, r) => (reject = r));
    const polled = pollWhile(work);
    await tick();
    reject(err);
    await expect(polled).rejects.toBe(err);
    await tick();
    await tick();
    expect(immediates()).toBe(0);
  });
});
