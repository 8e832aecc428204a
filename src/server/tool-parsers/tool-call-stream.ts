// Turns a model's streamed output into content and tool calls in OpenAI's delta shape, for any
// format (types.ts). Text is content until a call marker; a partial marker (and the whitespace
// before a possible call) is held back until it resolves, like the stop matcher. A call's first
// delta carries its index, id and name; its arguments follow as fragments. The whole-output parse
// is the same machine fed at once, so streamed and non-streamed results agree by construction.
import { randomUUID } from 'node:crypto';
import type { RegionScan, ToolCallFormat, ToolMarker } from './types.js';

export type ToolStreamEvent =
  | { type: 'content'; text: string }
  | { type: 'call'; index: number; id: string; name: string }
  | { type: 'args'; index: number; text: string };

export interface ParsedToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ToolParseResult {
  /** Text outside the calls; null when there is none (only whitespace). */
  content: string | null;
  calls: ParsedToolCall[];
}

export function newToolCallId(): string {
  return `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;
}

interface RegionState {
  text: string;
  /** Whitespace dropped in front of the marker (given back with the text if the region fails). */
  lead: string;
  /** Global index of each call of this region that was started (null: dropped, over maxCalls). */
  started: (number | null)[];
  sent: string[];
  scan: RegionScan | null;
}

interface Piece {
  content?: string;
  region?: RegionState;
  /** The region ended with the output, still open (truncated). */
  open?: boolean;
}

const WS_TAIL = /\s+$/;

export class ToolCallStream {
  private buf = '';
  private region: RegionState | null = null;
  /** No content yet (whitespace aside): start-only markers still count. */
  private atStart = true;
  /** Right after a call region: leading whitespace of the next text is dropped. */
  private afterCall = false;
  private nextIndex = 0;
  private readonly ids: string[] = [];
  private readonly names: string[] = [];
  private readonly pieces: Piece[] = [];
  private finished = false;

  constructor(
    readonly format: ToolCallFormat,
    /** parallel_tool_calls=false: 1. Calls past it are dropped (with their text). */
    private readonly maxCalls = Infinity,
  ) {}

  /** Parses a whole output at once. */
  static parse(format: ToolCallFormat, text: string, maxCalls = Infinity): ToolParseResult {
    const s = new ToolCallStream(format, maxCalls);
    s.push(text);
    s.finish();
    return s.result();
  }

  get callCount(): number {
    return this.nextIndex;
  }

  push(text: string): ToolStreamEvent[] {
    if (this.finished) throw new Error('ToolCallStream: push after finish');
    if (this.region) this.region.text += text;
    else this.buf += text;
    const out: ToolStreamEvent[] = [];
    this.run(false, out);
    return out;
  }

  /** The output ended: held text is released, an open call region is closed as it stands. */
  finish(): ToolStreamEvent[] {
    const out: ToolStreamEvent[] = [];
    if (this.finished) return out;
    this.run(true, out);
    this.finished = true;
    return out;
  }

  /** The whole-output view: a region whose calls did not all parse is given back as content. */
  result(): ToolParseResult {
    let content = '';
    const calls: ParsedToolCall[] = [];
    for (const p of this.pieces) {
      if (p.content !== undefined) {
        content += p.content;
        continue;
      }
      const r = p.region!;
      const scanned = r.scan?.calls ?? [];
      const good = !p.open && scanned.length > 0 && scanned.every((c) => c.done && !c.broken && c.name !== undefined);
      if (!good) {
        content += r.lead + r.text;
        continue;
      }
      scanned.forEach((c, k) => {
        const index = r.started[k];
        if (index === null || index === undefined) return;
        calls.push({ id: this.ids[index]!, type: 'function', function: { name: c.name!, arguments: c.args } });
      });
    }
    return { content: content.trim().length > 0 ? content : null, calls };
  }

  private emitContent(text: string, out: ToolStreamEvent[]): void {
    let t = text;
    if (this.afterCall) {
      t = t.replace(/^\s+/, '');
      if (t.length === 0) return;
      this.afterCall = false;
    }
    if (t.length === 0) return;
    if (t.trim().length > 0) this.atStart = false;
    this.pieces.push({ content: t });
    out.push({ type: 'content', text: t });
  }

  private activeMarkers(): ToolMarker[] {
    return this.format.markers.filter((m) => !m.startOnly || this.atStart);
  }

  /** The earliest complete marker in buf: its position, or -1. */
  private findMarker(): number {
    let best = -1;
    const firstNonWs = this.buf.search(/\S/);
    for (const m of this.activeMarkers()) {
      const at = m.startOnly ? (firstNonWs >= 0 && this.buf.startsWith(m.text, firstNonWs) ? firstNonWs : -1) : this.buf.indexOf(m.text);
      if (at >= 0 && (best < 0 || at < best)) best = at;
    }
    return best;
  }

  /** How many trailing characters of buf to hold: a partial marker, or whitespace before one. */
  private holdBack(): number {
    let hold = 0;
    const firstNonWs = this.buf.search(/\S/);
    for (const m of this.activeMarkers()) {
      if (m.startOnly) {
        // Only the text right after leading whitespace can still become this marker.
        if (firstNonWs < 0) hold = Math.max(hold, this.buf.length);
        else if (m.text.startsWith(this.buf.slice(firstNonWs))) hold = Math.max(hold, this.buf.length);
        continue;
      }
      for (let n = Math.min(m.text.length - 1, this.buf.length); n > hold; n--) {
        if (this.buf.endsWith(m.text.slice(0, n))) {
          hold = n;
          break;
        }
      }
    }
    const before = this.buf.slice(0, this.buf.length - hold);
    const ws = WS_TAIL.exec(before);
    return hold + (ws ? ws[0].length : 0);
  }

  private run(final: boolean, out: ToolStreamEvent[]): void {
    for (;;) {
      if (this.region === null) {
        const at = this.findMarker();
        if (at >= 0) {
          const before = this.buf.slice(0, at);
          const lead = WS_TAIL.exec(before)?.[0] ?? '';
          this.emitContent(before.slice(0, before.length - lead.length), out);
          this.region = { text: this.buf.slice(at), lead: this.afterCall ? '' : lead, started: [], sent: [], scan: null };
          this.buf = '';
          continue;
        }
        const hold = final ? 0 : this.holdBack();
        this.emitContent(this.buf.slice(0, this.buf.length - hold), out);
        this.buf = this.buf.slice(this.buf.length - hold);
        return;
      }
      const r = this.region;
      const scan = this.format.scan(r.text, final);
      if (scan.invalid && r.started.length === 0) {
        // Not a call: the marker is content; scanning goes on after it.
        const marker = this.activeMarkers().find((m) => r.text.startsWith(m.text)) ?? this.format.markers.find((m) => r.text.startsWith(m.text));
        const n = marker?.text.length ?? 1;
        this.region = null;
        this.atStart = false;
        this.emitContent(r.lead + r.text.slice(0, n), out);
        this.buf = r.text.slice(n);
        continue;
      }
      r.scan = scan;
      this.emitCalls(r, out);
      if (scan.end !== null && !scan.invalid) {
        this.pieces.push({ region: { ...r, text: r.text.slice(0, scan.end) } });
        this.buf = r.text.slice(scan.end);
        this.region = null;
        this.atStart = false;
        this.afterCall = true;
        continue;
      }
      if (final || scan.invalid) {
        this.pieces.push({ region: r, open: true });
        this.region = null;
        return;
      }
      return;
    }
  }

  private emitCalls(r: RegionState, out: ToolStreamEvent[]): void {
    const calls = r.scan!.calls;
    for (let k = 0; k < calls.length; k++) {
      const c = calls[k]!;
      if (k >= r.started.length) {
        if (c.name === undefined) return; // later calls wait for this one's name
        if (this.nextIndex >= this.maxCalls) {
          r.started.push(null);
          r.sent.push('');
          continue;
        }
        const index = this.nextIndex++;
        this.ids[index] = newToolCallId();
        this.names[index] = c.name;
        r.started.push(index);
        r.sent.push('');
        out.push({ type: 'call', index, id: this.ids[index]!, name: c.name });
      }
      const index = r.started[k];
      if (index === null || index === undefined) continue;
      const sent = r.sent[k]!;
      if (c.args.length > sent.length && c.args.startsWith(sent)) {
        out.push({ type: 'args', index, text: c.args.slice(sent.length) });
        r.sent[k] = c.args;
      }
    }
  }
}
