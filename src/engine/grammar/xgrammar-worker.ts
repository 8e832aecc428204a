// Worker-thread side of the grammar host: owns one xgrammar wasm instance (compiler, compiled
// grammars, matchers) and runs the host's batches in order, off the event loop. A trap makes this
// instance unusable: the worker reports the op that trapped and the host replaces the whole thread.
// Each matcher runs behind the UTF-8 guard and budget closing, which need it synchronously.
import { parentPort } from 'node:worker_threads';
import { extractNumberRanges, substituteNumberRules } from './number-range.js';
import { guardRequestGrammar, type GuardedGrammar } from './guarded-grammar.js';
import type { GrammarNext, GrammarPick, TrialGrammar } from './request-grammar.js';
import { TokenBytes } from './token-bytes.js';
import { capturing, initWithErrorSink, isTrap, xgrammar, XgrammarTrap, type XgCompiledGrammar, type XgGrammarCompiler, type XgGrammarMatcher } from './xgrammar.js';
import type { XgBatch, XgInit, XgOp, XgReply, XgResult } from './xgrammar-protocol.js';

const port = parentPort;
if (port === null) throw new Error('xgrammar-worker.js must run as a worker thread');

// The instance's memory, seen as xgrammar instantiates its wasm (the bundle does not expose it):
// the host replaces an instance that grew too large (wasm memory never shrinks).
let memory: WebAssembly.Memory | null = null;
const instantiate = WebAssembly.instantiate.bind(WebAssembly) as (...args: unknown[]) => Promise<WebAssembly.WebAssemblyInstantiatedSource | WebAssembly.Instance>;
(WebAssembly as { instantiate: unknown }).instantiate = async (...args: unknown[]) => {
  const r = await instantiate(...args);
  const instance = r instanceof WebAssembly.Instance ? r : r.instance;
  for (const e of Object.values(instance.exports)) if (e instanceof WebAssembly.Memory) memory = e;
  return r;
};

/**
 * Tokens speculate() tries on a state (each accepted one is rolled back) and how many must fit: a
 * state that allows about a tenth of the vocabulary or more usually speculates. Its mask is the
 * costly kind (many tokens to check), and the model's top 16 usually hold an allowed token.
 */
const PROBES = 24;
const PROBES_TO_SPECULATE = 2;

let init: XgInit | null = null;
let compiler: XgGrammarCompiler | null = null;
let progress: Int32Array | null = null;
/** The vocabulary's byte tables (UTF-8 guard, budget closing), built once per instance. */
let tables: TokenBytes | null = null;
let stopWords = new Map<number, number>();
let stops = new Set<number>();
const compiled = new Map<string, XgCompiledGrammar>();
const matchers = new Map<number, Matcher>();

function isSet(mask: Int32Array, token: number): boolean {
  return ((mask[token >> 5] ?? 0) >>> (token & 31)) & 1 ? true : false;
}

function injected(): never {
  throw new WebAssembly.RuntimeError('memory access out of bounds (injected by a test)');
}

async function start(msg: XgInit): Promise<void> {
  init = msg;
  progress = new Int32Array(msg.progress);
  stops = new Set(msg.stopIds);
  stopWords = new Map();
  for (const t of msg.stopIds) stopWords.set(t >> 5, (stopWords.get(t >> 5) ?? 0) | (1 << (t & 31)));
  compiler = await initWithErrorSink(async () => {
    const xg = xgrammar();
    const info = await xg.TokenizerInfo.createTokenizerInfo(msg.vocab, msg.vocabType, false, msg.vocabSize, msg.stopIds);
    // Our own cache only: xgrammar's would keep a never-finished entry for a schema it aborted on.
    return xg.GrammarCompiler.createGrammarCompiler(info, false);
  });
  tables = new TokenBytes(msg.vocab, msg.vocabType, msg.vocabSize);
}

async function compile(op: Extract<XgOp, { op: 'compile' }>): Promise<XgCompiledGrammar> {
  if (op.trap) injected();
  const schema = JSON.parse(op.schema) as unknown;
  // Compact output: no whitespace anywhere (indent -1, any_whitespace false, tight separators).
  const ranges = extractNumberRanges(schema);
  if (ranges.rules.length === 0) return capturing(() => compiler!.compileJSONSchema(op.schema, false, -1, [',', ':'], op.strict));
  // Bounded numbers get exact rules of our own (xgrammar's float ranges are unsound).
  const ebnf = await capturing(() => xgrammar().Testings._jsonSchemaToEBNF(JSON.stringify(ranges.schema), false, -1, [',', ':'], op.strict));
  return capturing(() => compiler!.compileGrammar(substituteNumberRules(ebnf, ranges.rules), 'root'));
}

function matcher(id: number): Matcher {
  const m = matchers.get(id);
  if (m === undefined) throw new Error(`no grammar matcher ${id} in this instance`);
  return m;
}

/**
 * The synchronous view of one xgrammar matcher that the UTF-8 guard and budget closing wrap: they
 * try tokens and roll them back, which only works next to the matcher.
 */
class MatcherGrammar implements TrialGrammar {
  /** Picks probe tokens; it only decides where to speculate, never what is emitted. */
  private seed = 0x9e3779b9;

  constructor(private readonly m: XgGrammarMatcher) {}

  async next(): Promise<GrammarNext> {
    if (this.m.isTerminated()) return { kind: 'complete' };
    const bitmask = await this.m.getNextTokenBitmask();
    const banned = init!.banned;
    let any = false;
    let nonStop = false;
    for (let w = 0; w < bitmask.length; w++) {
      const v = (bitmask[w]! &= ~(banned[w] ?? 0));
      if (v === 0) continue;
      any = true;
      if ((v & ~(stopWords.get(w) ?? 0)) !== 0) nonStop = true;
    }
    if (!any) return { kind: 'dead' };
    if (!nonStop) return { kind: 'complete' };
    return { kind: 'mask', bitmask };
  }

  accept(token: number): boolean {
    return this.m.acceptToken(token);
  }

  rollBack(n: number): void {
    this.m.rollBack(n);
  }

  forcedText(): string {
    return this.m.findJumpForwardString();
  }

  speculate(): boolean {
    if (this.m.isTerminated()) return false;
    // Forced characters ahead (a key, a separator): one or two tokens fit, a ranked guess would miss.
    if (this.m.findJumpForwardString() !== '') return false;
    // The share of the vocabulary the state allows, estimated from a few ordinary tokens (each
    // accepted one is rolled back): narrow states (numbers, enums, string ends) keep their mask.
    const probes = init!.probes;
    let fit = 0;
    for (let i = 0; i < PROBES && fit < PROBES_TO_SPECULATE; i++) {
      this.seed = (Math.imul(this.seed, 1664525) + 1013904223) >>> 0;
      if (this.m.acceptToken(probes[this.seed % probes.length]!)) {
        this.m.rollBack(1);
        fit++;
      }
    }
    return fit >= PROBES_TO_SPECULATE;
  }

  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    const never = init!.never;
    for (let i = 0; i < candidates.length; i++) {
      const t = candidates[i]!;
      // Accepting a stop token cannot be undone, and a state that allows only stop tokens ends without
      // one: the mask tells these apart (this happens at the end of the output only).
      if (stops.has(t)) {
        const n = await this.next();
        if (n.kind !== 'mask') return n;
        for (const c of candidates.slice(i)) {
          if (!isSet(n.bitmask, c)) continue;
          if (!this.m.acceptToken(c)) throw new Error(`the grammar's mask allows token ${c} but its matcher rejects it`);
          return { kind: 'token', token: c };
        }
        return { kind: 'miss' };
      }
      if (isSet(never, t)) continue; // no mask allows these (next() clears banned ones)
      // A rejected token leaves the matcher as it was.
      if (this.m.acceptToken(t)) return { kind: 'token', token: t };
    }
    return { kind: 'miss' };
  }

  dispose(): void {
    this.m.dispose();
  }
}

interface Matcher {
  /** The matcher behind its UTF-8 guard and (unless opted out) budget closing. */
  g: GuardedGrammar;
  /** A token accepted without a mask was refused: the output can no longer be valid. */
  rejected: boolean;
  /** Tokens accepted (replayed ones included). */
  count: number;
}

/** Tells the matcher's chain the tokens its request has left, when the op says. */
function withLeft(id: number, left: number | undefined): Matcher {
  const m = matcher(id);
  if (left !== undefined) m.g.setTokensLeft(left);
  return m;
}

function closed(g: Matcher): boolean {
  return g.g.closedByBudget?.() === true;
}

async function run(op: XgOp, transfer: ArrayBuffer[]): Promise<XgResult> {
  switch (op.op) {
    case 'compile': {
      if (compiled.has(op.key)) return { ok: true };
      try {
        compiled.set(op.key, await compile(op));
        return { ok: true };
      } catch (err) {
        if (err instanceof XgrammarTrap || isTrap(err)) throw err;
        return { ok: false, error: (err as Error).message };
      }
    }
    case 'evict':
      compiled.get(op.key)?.dispose();
      compiled.delete(op.key);
      return { ok: true };
    case 'create': {
      const c = compiled.get(op.key);
      if (c === undefined) return { ok: false, error: 'its grammar is not compiled in this instance' };
      const m = await xgrammar().GrammarMatcher.createGrammarMatcher(c, init!.stopIds, false);
      const { grammar, shortest } = guardRequestGrammar(new MatcherGrammar(m), tables!, init!.stopIds, op.options);
      const g: Matcher = { g: grammar, rejected: false, count: op.history.length };
      matchers.get(op.id)?.g.dispose();
      matchers.set(op.id, g);
      // A replay rebuilds the wrappers' state too: the tokens go through the whole chain.
      for (const t of op.history) {
        if (!grammar.accept(t)) return { ok: false, error: `replaying its tokens, the grammar rejected token ${t}` };
      }
      if (op.left !== undefined) grammar.setTokensLeft(op.left);
      return { ok: true, shortest };
    }
    case 'next': {
      if (op.trap) injected();
      const g = withLeft(op.id, op.left);
      const n: GrammarNext = g.rejected ? { kind: 'dead' } : await g.g.next();
      if (n.kind === 'mask') transfer.push(n.bitmask.buffer as ArrayBuffer);
      return { ok: true, next: n, closed: closed(g) };
    }
    case 'accept': {
      const g = withLeft(op.id, op.left);
      if (op.at < g.count) return { ok: true, accepted: true, closed: closed(g) }; // a replay accepted it already
      if (op.at > g.count) throw new Error(`token ${op.at} of the output came before token ${g.count}`);
      const accepted = !g.rejected && g.g.accept(op.token);
      if (!accepted) g.rejected = true;
      g.count++;
      return { ok: true, accepted, closed: closed(g) };
    }
    case 'acceptBest': {
      const g = withLeft(op.id, op.left);
      const pick: GrammarPick = g.rejected ? { kind: 'dead' } : await g.g.acceptBest(op.candidates);
      if (pick.kind === 'token') g.count++;
      return { ok: true, pick, closed: closed(g) };
    }
    case 'speculate': {
      const g = withLeft(op.id, op.left);
      return { ok: true, wide: !g.rejected && g.g.speculate(), closed: closed(g) };
    }
    case 'dispose':
      matchers.get(op.id)?.g.dispose();
      matchers.delete(op.id);
      return { ok: true };
  }
}

async function batch(msg: XgBatch): Promise<void> {
  const results: XgResult[] = [];
  const transfer: ArrayBuffer[] = [];
  for (let i = 0; i < msg.ops.length; i++) {
    Atomics.store(progress!, 0, i);
    try {
      results.push(await run(msg.ops[i]!, transfer));
    } catch (err) {
      if (isTrap(err)) {
        const reply: XgReply = { type: 'trap', seq: msg.seq, index: i, message: (err as Error).message, results };
        port!.postMessage(reply, transfer);
        return;
      }
      results.push({ ok: false, error: (err as Error).message });
    }
  }
  const reply: XgReply = { type: 'done', seq: msg.seq, results, memoryBytes: memory?.buffer.byteLength ?? 0 };
  port!.postMessage(reply, transfer);
}

// One message at a time: a batch's awaits must not let the next batch interleave with it.
let chain = Promise.resolve();
port.on('message', (msg: XgInit | XgBatch) => {
  chain = chain.then(async () => {
    if (msg.type === 'init') {
      await start(msg);
      const reply: XgReply = { type: 'ready' };
      port.postMessage(reply);
    } else await batch(msg);
  }).catch((err: unknown) => {
    // Only start() can get here (batch() answers every op): the host replaces this instance.
    const reply: XgReply = { type: 'fatal', message: err instanceof Error ? err.message : String(err) };
    port.postMessage(reply);
  });
});
