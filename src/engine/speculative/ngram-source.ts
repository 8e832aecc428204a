// Prompt-lookup drafts (vLLM's ngram proposer, llama.cpp's lookup decoding): the last n tokens, for n
// from maxN down to minN, are looked up in the request's own context; the latest earlier occurrence
// wins and the k tokens that followed it are the draft. Extraction, summaries that quote, code edits
// and JSON that repeats its input copy spans of the prompt, so those spans come back as drafts.
import type { DraftSource } from './draft-source.js';

export interface NgramOptions {
  /** Longest suffix matched first (more context, fewer false drafts). */
  maxN: number;
  /** Shortest suffix tried. */
  minN: number;
  /** Tokens searched back from the end at most: bounds the per-step cost on long contexts. */
  window: number;
}

export const NGRAM_DEFAULTS: NgramOptions = { maxN: 4, minN: 2, window: 8192 };

export class NgramDraftSource implements DraftSource {
  readonly name = 'ngram';
  private readonly o: NgramOptions;

  constructor(options: Partial<NgramOptions> = {}) {
    this.o = { ...NGRAM_DEFAULTS, ...options };
    if (!(this.o.minN >= 1 && this.o.maxN >= this.o.minN && this.o.window > this.o.maxN)) {
      throw new Error('ngram drafts need 1 <= minN <= maxN < window');
    }
  }

  propose(tokens: readonly number[], k: number): number[] {
    const L = tokens.length;
    if (k <= 0) return [];
    const lo = Math.max(0, L - this.o.window);
    for (let n = Math.min(this.o.maxN, L - 1); n >= this.o.minN; n--) {
      // An occurrence starting at s ends before the suffix itself starts matching at L - n.
      for (let s = L - n - 1; s >= lo; s--) {
        let i = 0;
        while (i < n && tokens[s + i] === tokens[L - n + i]) i++;
        if (i < n) continue;
        // Past the context's end the copy continues from the draft itself: a loop of period < k
        // (tokens[from..L) repeating) still fills k.
        const from = s + n;
        const out: number[] = [];
        for (let j = 0; j < k; j++) out.push(from + j < L ? tokens[from + j]! : out[from + j - L]!);
        return out;
      }
    }
    return [];
  }
}
