import { describe, expect, it } from 'vitest';

import { StopMatcher } from '../../src/engine/stop-matcher.js';

function run(m: StopMatcher, deltas: string[]): { out: string; stop: string | null } {
  let out = '';
  let stop: string | null = null;
  for (const d of deltas) {
    const r = m.push(d);
    out += r.text;
    if (r.stop !== null) { stop = r.stop; break; }
  }
  if (stop === null) out += m.flush();
  return { out, stop };
}

describe('StopMatcher', () => {
  it('passes text through without stop strings', () => {
    expect(run(new StopMatcher(), ['ab', 'cd'])).toEqual({ out: 'abcd', stop: null });
  });

  it('finds a stop string spanning deltas and does not emit it', () => {
    const m = new StopMatcher({ stopStrings: ['###'] });
    expect(m.push('hello #')).toEqual({ text: 'hello ', stop: null });
    expect(m.push('#')).toEqual({ text: '', stop: null });
    expect(m.push('# tail')).toEqual({ text: '', stop: '###' });
    expect(m.push('more')).toEqual({ text: '', stop: '###' });
  });

  it('releases held text once it cannot start a stop string', () => {
    const m = new StopMatcher({ stopStrings: ['STOP'] });
    expect(m.push('ST')).toEqual({ text: '', stop: null });
    expect(m.push('x')).toEqual({ text: 'STx', stop: null });
  });

  it('truncates at the earliest stop and prefers the one completing first', () => {
    expect(run(new StopMatcher({ stopStrings: ['cd', 'b'] }), ['abcd'])).toEqual({ out: 'a', stop: 'b' });
    expect(run(new StopMatcher({ stopStrings: ['abc', 'ab'] }), ['xabc'])).toEqual({ out: 'x', stop: 'ab' });
  });

  it('flushes held-back prefix text at the end', () => {
    expect(run(new StopMatcher({ stopStrings: ['</s>'] }), ['done </'])).toEqual({ out: 'done </', stop: null });
  });

  it('handles every chunking of a text the same way', () => {
    const text = 'The answer is 42.\nUser: hi';
    for (let cut1 = 0; cut1 <= text.length; cut1++) {
      for (let cut2 = cut1; cut2 <= text.length; cut2 += 3) {
        const r = run(new StopMatcher({ stopStrings: ['\nUser:', 'zzz'] }), [text.slice(0, cut1), text.slice(cut1, cut2), text.slice(cut2)]);
        expect(r).toEqual({ out: 'The answer is 42.', stop: '\nUser:' });
      }
    }
  });

  it('recognises stop token ids', () => {
    const m = new StopMatcher({ stopTokenIds: [2, 106] });
    expect(m.isStopToken(106)).toBe(true);
    expect(m.isStopToken(5)).toBe(false);
  });

  it('ignores empty stop strings', () => {
    expect(run(new StopMatcher({ stopStrings: [''] }), ['abc'])).toEqual({ out: 'abc', stop: null });
  });
});
