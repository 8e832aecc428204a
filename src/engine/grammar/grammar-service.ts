// The grammar service of one model: compiles response formats with xgrammar against the model's
// vocabulary (cached by schema hash) and hands out one matcher per request. xgrammar runs in a
// worker thread (xgrammar-host.ts), started on the first constrained request only, so free-text
// serving never pays for it; its limits are checked here first (schema-limits.ts). There each
// matcher runs behind a UTF-8 guard and budget-aware closing (guarded-grammar.ts).
import { createHash } from 'node:crypto';
import { InvalidRequestError, EngineUnavailableError } from '../../errors/request-errors.js';
import { maxTokensTooLowMessage, type RequestGrammarOptions } from './guarded-grammar.js';
import type { GrammarNext, GrammarPick, RequestGrammar } from './request-grammar.js';
import type { GrammarSpec } from './grammar-spec.js';
import { checkSchemaLimits, type WorkerLimits } from './schema-limits.js';
import { XgrammarHost, type MatcherRecord } from './xgrammar-host.js';

/** The parts of a tokenizer the grammar needs. */
export interface GrammarTokenizer {
  readonly vocabSize: number;
  readonly decoderTypes: ReadonlySet<string>;
  idToToken(id: number): string | undefined;
  isSpecialId(id: number): boolean;
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
}

export interface GrammarServiceOptions {
  tokenizer: GrammarTokenizer;
  /** The model's vocab size (bitmask width); may exceed the tokenizer's. */
  vocabSize: number;
  stopTokenIds: Iterable<number>;
  /** Compiled grammars kept (by schema hash). */
  cacheSize?: number;
  /** Tests only: lower time limits for the worker (default GRAMMAR_WORKER_LIMITS). */
  workerLimits?: Partial<WorkerLimits>;
  /** Tests only: false sends schemas to xgrammar unchecked (to meet its real traps). */
  checkLimits?: boolean;
}

export type GrammarHealth = { status: 'ok' } | { status: 'degraded'; reason: string };

export interface GrammarProvider {
  /**
   * Compiles (or finds cached) and returns a fresh matcher; InvalidRequestError when unsupported,
   * or when budget closing finds no valid output within options.maxTokens.
   */
  matcher(format: GrammarSpec, options?: RequestGrammarOptions): Promise<RequestGrammar>;
  /** Degraded while the grammar engine is being rebuilt (requests still run; they wait for it). */
  health?(): GrammarHealth;
  /** Stops its worker (server shutdown). */
  close?(): Promise<void>;
}

/** The token strings xgrammar decodes: special and unknown ids become "" (never allowed). */
function encodedVocab(tok: GrammarTokenizer, vocabSize: number): string[] {
  const n = Math.min(tok.vocabSize, vocabSize);
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) out[i] = tok.isSpecialId(i) ? '' : (tok.idToToken(i) ?? '');
  return out;
}

/**
 * Tokens whose text holds a control character (U+0000-U+001F). xgrammar's JSON strings admit them
 * raw, but JSON does not; compact output has no whitespace, so no valid token ever needs one.
 */
function controlTokenMask(tok: GrammarTokenizer, vocabSize: number): Int32Array {
  const mask = new Int32Array(Math.ceil(vocabSize / 32));
  const n = Math.min(tok.vocabSize, vocabSize);
  for (let i = 0; i < n; i++) {
    if (/[\u0000-\u001f]/.test(tok.decode([i], { skipSpecialTokens: false }))) mask[i >> 5]! |= 1 << (i & 31);
  }
  return mask;
}

function vocabType(tok: GrammarTokenizer): string {
  if (tok.decoderTypes.has('ByteLevel')) return 'byte_level';
  if (tok.decoderTypes.has('ByteFallback')) return 'byte_fallback';
  return 'raw';
}

export class GrammarService implements GrammarProvider {
  private readonly opts: GrammarServiceOptions;
  private readonly stopIds: number[];
  private readonly host: XgrammarHost;
  /** Keys compiled in the worker, least recently used first. */
  private readonly compiled = new Map<string, true>();
  /** Schemas refused (unsupported, trapped, too slow), by key: refused again at once. */
  private readonly refused = new Map<string, Error>();
  private readonly cacheSize: number;
  private nextId = 0;

  constructor(opts: GrammarServiceOptions) {
    this.opts = opts;
    this.stopIds = [...opts.stopTokenIds].filter((t) => t >= 0 && t < opts.vocabSize);
    this.cacheSize = opts.cacheSize ?? 256;
    this.host = new XgrammarHost(opts.workerLimits ?? {}, () => {
      const { tokenizer, vocabSize } = this.opts;
      const banned = controlTokenMask(tokenizer, vocabSize);
      const tables = speculationTables(tokenizer, vocabSize, banned, this.stopIds);
      return { vocab: encodedVocab(tokenizer, vocabSize), vocabType: vocabType(tokenizer), vocabSize, stopIds: this.stopIds, banned, never: tables.never, probes: tables.probes };
    });
  }

  health(): GrammarHealth {
    const h = this.host.health();
    return h.ok ? { status: 'ok' } : { status: 'degraded', reason: h.reason };
  }

  /** Instances of the grammar engine replaced after a trap or a timeout. */
  get rebuilds(): number {
    return this.host.rebuilds;
  }

  /** Stops the grammar worker; live matchers die with it. */
  close(): Promise<void> {
    return this.host.close();
  }

  /** The schema a format compiles, its JSON, and its cache key. */
  private prepare(format: GrammarSpec): { text: string; strict: boolean; key: string } {
    // json_object is "any object": the schema {"type":"object"} in non-strict mode, compact.
    const schema = format.type === 'json_object' ? { type: 'object' } : format.schema;
    const strict = format.type === 'json_schema' && format.strict;
    if (this.opts.checkLimits !== false) checkSchemaLimits(schema); // callers may not have parsed it (tool calls wrap parameters)
    const text = JSON.stringify(schema);
    const key = createHash('sha256').update(`${strict ? 1 : 0}:${text}`).digest('hex');
    return { text, strict, key };
  }

  /** Compiles a response format in the worker, cached by the hash of its schema. */
  async compile(format: GrammarSpec): Promise<string> {
    return (await this.prepareAndCompile(format)).key;
  }

  private async prepareAndCompile(format: GrammarSpec): Promise<{ text: string; strict: boolean; key: string }> {
    const prepared = this.prepare(format);
    const { text, strict, key } = prepared;
    const refusal = this.refused.get(key);
    if (refusal !== undefined) throw refusal;
    try {
      await this.host.compile(key, text, strict);
    } catch (err) {
      if (err instanceof InvalidRequestError) {
        this.refused.set(key, err);
        while (this.refused.size > this.cacheSize) this.refused.delete(this.refused.keys().next().value as string);
      }
      throw err;
    }
    this.compiled.delete(key); // most recently used last
    this.compiled.set(key, true);
    while (this.compiled.size > this.cacheSize) {
      const old = this.compiled.keys().next().value as string;
      this.compiled.delete(old);
      this.host.evict(old);
    }
    return prepared;
  }

  async matcher(format: GrammarSpec, options: RequestGrammarOptions = {}): Promise<RequestGrammar> {
    const { text, strict, key } = await this.prepareAndCompile(format);
    const record: MatcherRecord = { id: ++this.nextId, key, schema: text, strict, options: { ...options }, history: [], dead: null };
    let shortest: number | null;
    try {
      shortest = await this.host.create(record);
    } catch (err) {
      // Not the request's fault: the instance failed under it (503, retry).
      throw new EngineUnavailableError(`the grammar engine could not start this request: ${(err as Error).message}`, 'unhealthy', 1);
    }
    if (shortest !== null && options.maxTokens !== undefined && shortest > options.maxTokens) {
      this.host.release(record);
      throw new InvalidRequestError(maxTokensTooLowMessage(options.maxTokens, shortest), 'max_tokens');
    }
    return new WorkerRequestGrammar(this.host, record);
  }
}

interface SpeculationTables {
  /** Tokens no mask ever allows besides stop tokens (banned, special, past the tokenizer): never tried. */
  never: Int32Array;
  /** The ordinary tokens (all the others but stop tokens): the sample speculate() probes a state with. */
  probes: Int32Array;
}

function speculationTables(tok: GrammarTokenizer, vocabSize: number, banned: Int32Array, stopIds: readonly number[]): SpeculationTables {
  const stops = new Set(stopIds);
  const never = Int32Array.from(banned);
  const probes: number[] = [];
  const n = Math.min(tok.vocabSize, vocabSize);
  for (let i = 0; i < vocabSize; i++) {
    if (stops.has(i)) continue;
    // xgrammar rejects special tokens with a printed warning: they are skipped before it sees them.
    if (i >= n || tok.isSpecialId(i)) never[i >> 5]! |= 1 << (i & 31);
    else if (!isSet(banned, i)) probes.push(i);
  }
  return { never, probes: Int32Array.from(probes) };
}

function isSet(mask: Int32Array, token: number): boolean {
  return ((mask[token >> 5] ?? 0) >>> (token & 31)) & 1 ? true : false;
}

/**
 * One request's matcher, living in the worker. accept() stays synchronous: after next() the mask
 * already says whether the token is allowed (the engine's use), and the worker accepts it in order
 * with the next op. A token accepted without a fresh mask is checked there; if refused, the
 * grammar's next verdict is "dead". The tokens left go with the next op; every reply says whether
 * budget closing has ended the output.
 */
class WorkerRequestGrammar implements RequestGrammar {
  private disposed = false;
  /** The mask of the state after `maskAt` accepted tokens. */
  private mask: Int32Array | null = null;
  private maskAt = -1;
  private closed = false;

  constructor(
    private readonly host: XgrammarHost,
    private readonly record: MatcherRecord,
  ) {}

  private async call(op: Parameters<XgrammarHost['call']>[0]) {
    const r = await this.host.call(op, this.record);
    if (!r.ok) throw new Error(r.error);
    this.closed = r.closed === true;
    return r;
  }

  setTokensLeft(n: number): void {
    this.record.left = n;
  }

  closedByBudget(): boolean {
    return this.closed;
  }

  async next(): Promise<GrammarNext> {
    if (this.disposed) return { kind: 'dead' };
    const at = this.record.history.length;
    const n = (await this.call({ op: 'next', id: this.record.id, left: this.record.left })).next!;
    if (n.kind === 'mask' && this.record.history.length === at) {
      this.mask = n.bitmask;
      this.maskAt = at;
    }
    return n;
  }

  accept(token: number): boolean {
    if (this.disposed || this.record.dead !== null) return false;
    if (this.mask !== null && this.maskAt === this.record.history.length && !isSet(this.mask, token)) return false;
    const at = this.record.history.push(token) - 1;
    this.mask = null;
    this.host
      .call({ op: 'accept', id: this.record.id, token, at, left: this.record.left }, this.record)
      .then((r) => {
        if (r.ok && !this.disposed) this.closed = r.closed === true;
      })
      .catch(() => undefined);
    return true;
  }

  async speculate(): Promise<boolean> {
    if (this.disposed) return false;
    return (await this.call({ op: 'speculate', id: this.record.id, left: this.record.left })).wide === true;
  }

  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    if (this.disposed) return { kind: 'dead' };
    const pick = (await this.call({ op: 'acceptBest', id: this.record.id, candidates: [...candidates], left: this.record.left })).pick!;
    if (pick.kind === 'token') {
      this.record.history.push(pick.token);
      this.mask = null;
    }
    return pick;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.host.release(this.record);
  }
}

/** The grammar service of a loaded model (tokenizer bundle + native vocab size). */
export function grammarServiceFor(text: { tokenizer: GrammarTokenizer; stopTokenIds: Iterable<number> }, vocabSize: number): GrammarService {
  return new GrammarService({ tokenizer: text.tokenizer, vocabSize, stopTokenIds: text.stopTokenIds });
}
