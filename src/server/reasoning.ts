// Splits a thinking model's streamed output into reasoning and content: text inside the leading
// <think>...</think> block goes to reasoning_content, never to content (Qwen3 format). Partial tags
// are held back until they resolve, so a stream never leaks half a tag into either field.
const OPEN = '<think>';
const CLOSE = '</think>';

export interface ReasoningPiece {
  reasoning: string;
  content: string;
}

/** The longest suffix of `s` that is a proper prefix of `tag`. */
function partialTagSuffix(s: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, s.length); n > 0; n--) if (tag.startsWith(s.slice(s.length - n))) return n;
  return 0;
}

export class ReasoningSplitter {
  private state: 'start' | 'reasoning' | 'after' | 'content' = 'start';
  private held = '';

  push(text: string): ReasoningPiece {
    const out: ReasoningPiece = { reasoning: '', content: '' };
    let s = this.held + text;
    this.held = '';
    for (;;) {
      if (this.state === 'start') {
        const t = s.trimStart();
        if (t.startsWith(OPEN)) {
          this.state = 'reasoning';
          s = t.slice(OPEN.length);
          continue;
        }
        if (OPEN.startsWith(t)) {
          this.held = s; // whitespace or a partial "<think>": undecided
          return out;
        }
        this.state = 'content';
        continue;
      }
      if (this.state === 'reasoning') {
        const i = s.indexOf(CLOSE);
        if (i >= 0) {
          out.reasoning += s.slice(0, i);
          s = s.slice(i + CLOSE.length);
          this.state = 'after';
          continue;
        }
        const keep = partialTagSuffix(s, CLOSE);
        out.reasoning += s.slice(0, s.length - keep);
        this.held = s.slice(s.length - keep);
        return out;
      }
      if (this.state === 'after') {
        // The newlines that separate the think block from the answer belong to neither.
        const t = s.replace(/^\n+/, '');
        if (t.length === 0) return out;
        this.state = 'content';
        s = t;
        continue;
      }
      out.content += s;
      return out;
    }
  }

  /** The end of the output: whatever was held back goes where it was heading. */
  flush(): ReasoningPiece {
    const s = this.held;
    this.held = '';
    if (this.state === 'reasoning') return { reasoning: s, content: '' };
    return { reasoning: '', content: s };
  }

  /** Splits a whole output at once. */
  static split(text: string): ReasoningPiece {
    const r = new ReasoningSplitter();
    const a = r.push(text);
    const b = r.flush();
    return { reasoning: a.reasoning + b.reasoning, content: a.content + b.content };
  }
}
