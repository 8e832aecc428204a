// Stop conditions over streamed text: stop strings that may span deltas (matching text is held back
// until it is known not to start a stop string) and stop token ids. Like OpenAI, the stop string
// itself is not part of the output.

export interface StopMatcherOptions {
  stopStrings?: readonly string[];
  stopTokenIds?: Iterable<number>;
}

export interface StopPushResult {
  /** Text that is now safe to emit. */
  text: string;
  /** The stop string that ended generation, or null. */
  stop: string | null;
}

export class StopMatcher {
  private readonly stops: string[];
  private readonly stopIds: Set<number>;
  private held = '';
  private stoppedOn: string | null = null;

  constructor(options: StopMatcherOptions = {}) {
    this.stops = [...new Set((options.stopStrings ?? []).filter((s) => s.length > 0))];
    this.stopIds = new Set(options.stopTokenIds ?? []);
  }

  isStopToken(id: number): boolean {
    return this.stopIds.has(id);
  }

  /** The stop string that matched, once one has. */
  get stopped(): string | null {
    return this.stoppedOn;
  }

  /** Feeds a text delta; after a stop, further text is dropped. */
  push(delta: string): StopPushResult {
    if (this.stoppedOn !== null) return { text: '', stop: this.stoppedOn };
    const buffer = this.held + delta;
    if (this.stops.length === 0) {
      this.held = '';
      return { text: buffer, stop: null };
    }
    // The earliest occurrence wins; at the same position the shorter string completes first.
    let bestIdx = -1;
    let best: string | null = null;
    for (const s of this.stops) {
      const idx = buffer.indexOf(s);
      if (idx < 0) continue;
      if (bestIdx < 0 || idx < bestIdx || (idx === bestIdx && s.length < best!.length)) {
        bestIdx = idx;
        best = s;
      }
    }
    if (best !== null) {
      this.stoppedOn = best;
      this.held = '';
      return { text: buffer.slice(0, bestIdx), stop: best };
    }
    const hold = this.partialStopSuffix(buffer);
    this.held = buffer.slice(buffer.length - hold);
    return { text: buffer.slice(0, buffer.length - hold), stop: null };
  }

  /** Releases held-back text when generation ends for another reason (length, stop token). */
  flush(): string {
    const out = this.stoppedOn === null ? this.held : '';
    this.held = '';
    return out;
  }

  /** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
  private partialStopSuffix(text: string): number {
    let best = 0;
    for (const s of this.stops) {
      const max = Math.min(s.length - 1, text.length);
      for (let len = max; len > best; len--) {
        if (text.endsWith(s.slice(0, len))) {
          best = len;
          break;
        }
      }
    }
    return best;
  }
}
