// The grammar service of one model: compiles response formats with xgrammar against the model's
// vocabulary (cached by schema hash) and hands out one matcher per request. xgrammar is loaded on
// the first constrained request only, so free-text serving never pays for it.
import { createHash } from 'node:crypto';
import { InvalidRequestError } from '../errors.js';
import type { GrammarNext, GrammarPick, RequestGrammar, TrialGrammar } from './request-grammar.js';
import { guardRequestGrammar, type RequestGrammarOptions } from './guarded-grammar.js';
import { extractNumberRanges, substituteNumberRules } from './number-range.js';
import type { ResponseFormat } from './response-format.js';
import { capturing, initWithErrorSink, xgrammar, type XgCompiledGrammar, type XgGrammarCompiler, type XgGrammarMatcher } from './xgrammar.js';

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
}

export interface GrammarProvider {
  /** Compiles (or finds cached) and returns a fresh matcher; InvalidRequestError when unsupported. */
  matcher(format: ResponseFormat, options?: RequestGrammarOptions): Promise<RequestGrammar>;
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
  private compiler: Promise<XgGrammarCompiler> | null = null;
  private readonly cache = new Map<string, Promise<XgCompiledGrammar>>();
  private readonly cacheSize: number;
  private banned: Int32Array | null = null;
  private speculation: SpeculationTables | null = null;

  constructor(opts: GrammarServiceOptions) {
    this.opts = opts;
    this.stopIds = [...opts.stopTokenIds].filter((t) => t >= 0 && t < opts.vocabSize);
    this.cacheSize = opts.cacheSize ?? 256;
  }

  private getCompiler(): Promise<XgGrammarCompiler> {
    this.compiler ??= initWithErrorSink(async () => {
      const xg = xgrammar();
      const { tokenizer, vocabSize } = this.opts;
      const info = await xg.TokenizerInfo.createTokenizerInfo(encodedVocab(tokenizer, vocabSize), vocabType(tokenizer), false, vocabSize, this.stopIds);
      // Our own cache only: xgrammar's would keep a never-finished entry for a schema it aborted on,
      // and the next compile of that schema would wait on it forever.
      return xg.GrammarCompiler.createGrammarCompiler(info, false);
    });
    return this.compiler;
  }

  /** Compiles a response format, cached by the hash of its schema. */
  compile(format: ResponseFormat): Promise<XgCompiledGrammar> {
    // json_object is "any object": the schema {"type":"object"} in non-strict mode, compact.
    const schema = format.type === 'json_object' ? { type: 'object' } : format.schema;
    const strict = format.type === 'json_schema' && format.strict;
    const text = JSON.stringify(schema);
    const key = createHash('sha256').update(`${strict ? 1 : 0}:${text}`).digest('hex');
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key); // most recently used last
      this.cache.set(key, hit);
      return hit;
    }
    const compiled = (async () => {
      const compiler = await this.getCompiler();
      try {
        // Compact output: no whitespace anywhere (indent -1, any_whitespace false, tight separators).
        const ranges = extractNumberRanges(schema);
        if (ranges.rules.length === 0) return await capturing(() => compiler.compileJSONSchema(text, false, -1, [',', ':'], strict));
        // Bounded numbers get exact rules of our own (xgrammar's float ranges are unsound).
        const ebnf = await capturing(() => xgrammar().Testings._jsonSchemaToEBNF(JSON.stringify(ranges.schema), false, -1, [',', ':'], strict));
        return await capturing(() => compiler.compileGrammar(substituteNumberRules(ebnf, ranges.rules), 'root'));
      } catch (err) {
        throw new InvalidRequestError(`response_format: the schema is not supported: ${(err as Error).message}`, 'response_format');
      }
    })();
    this.cache.set(key, compiled);
    compiled.catch(() => undefined); // a refused schema stays cached: it is refused again at once
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
    return compiled;
  }

  async matcher(format: ResponseFormat, options?: RequestGrammarOptions): Promise<RequestGrammar> {
    const compiled = await this.compile(format);
    const xg = xgrammar();
    const m = await xg.GrammarMatcher.createGrammarMatcher(compiled, this.stopIds, false);
    this.banned ??= controlTokenMask(this.opts.tokenizer, this.opts.vocabSize);
    this.speculation ??= speculationTables(this.opts.tokenizer, this.opts.vocabSize, this.banned, this.stopIds);
    const g = new XgRequestGrammar(m, this.stopIds, this.banned, this.speculation);
    return guardRequestGrammar(g, this.opts.tokenizer, this.opts.vocabSize, this.stopIds, options);
  }
}

interface SpeculationTables {
  /** Tokens no mask ever allows besides stop tokens (banned, special, past the tokenizer): never tried. */
  never: Int32Array;
  /** The ordinary tokens (all the others but stop tokens): the sample speculate() probes a state with. */
  probes: Int32Array;
  /** The stop tokens, which acceptBest() leaves to the mask. */
  stops: ReadonlySet<number>;
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
  return { never, probes: Int32Array.from(probes), stops };
}

function isSet(mask: Int32Array, token: number): boolean {
  return ((mask[token >> 5] ?? 0) >>> (token & 31)) & 1 ? true : false;
}

/**
 * Tokens speculate() tries on a state (each accepted one is rolled back) and how many must fit: a
 * state that allows about a tenth of the vocabulary or more usually speculates. Its mask is the
 * costly kind (many tokens to check), and the model's top 16 usually hold an allowed token.
 */
const PROBES = 24;
const PROBES_TO_SPECULATE = 2;

/** One request's matcher. */
class XgRequestGrammar implements TrialGrammar {
  private disposed = false;
  /** Picks probe tokens; it only decides where to speculate, never what is emitted. */
  private seed = 0x9e3779b9;

  constructor(
    private readonly m: XgGrammarMatcher,
    private readonly stopIds: readonly number[],
    private readonly banned: Int32Array,
    private readonly tables: SpeculationTables,
  ) {}

  async next(): Promise<GrammarNext> {
    if (this.disposed) return { kind: 'dead' };
    if (this.m.isTerminated()) return { kind: 'complete' };
    const bitmask = await this.m.getNextTokenBitmask();
    let any = false;
    let nonStop = false;
    const stopWords = new Map<number, number>();
    for (const t of this.stopIds) stopWords.set(t >> 5, (stopWords.get(t >> 5) ?? 0) | (1 << (t & 31)));
    for (let w = 0; w < bitmask.length; w++) {
      const v = (bitmask[w]! &= ~(this.banned[w] ?? 0));
      if (v === 0) continue;
      any = true;
      if ((v & ~(stopWords.get(w) ?? 0)) !== 0) nonStop = true;
    }
    if (!any) return { kind: 'dead' };
    if (!nonStop) return { kind: 'complete' };
    return { kind: 'mask', bitmask };
  }

  accept(token: number): boolean {
    if (this.disposed) return false;
    return this.m.acceptToken(token);
  }

  speculate(): boolean {
    if (this.disposed || this.m.isTerminated()) return false;
    // Forced characters ahead (a key, a separator): one or two tokens fit, a ranked guess would miss.
    if (this.m.findJumpForwardString() !== '') return false;
    // The share of the vocabulary the state allows, estimated from a few ordinary tokens (each
    // accepted one is rolled back): narrow states (numbers, enums, string ends) keep their mask.
    let fit = 0;
    for (let i = 0; i < PROBES && fit < PROBES_TO_SPECULATE; i++) {
      this.seed = (Math.imul(this.seed, 1664525) + 1013904223) >>> 0;
      if (this.m.acceptToken(this.tables.probes[this.seed % this.tables.probes.length]!)) {
        this.m.rollBack(1);
        fit++;
      }
    }
    return fit >= PROBES_TO_SPECULATE;
  }

  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    if (this.disposed) return { kind: 'dead' };
    for (let i = 0; i < candidates.length; i++) {
      const t = candidates[i]!;
      // Accepting a stop token cannot be undone, and a state that allows only stop tokens ends without
      // one: the mask tells these apart (this happens at the end of the output only).
      if (this.tables.stops.has(t)) return this.pickWithMask(candidates.slice(i));
      if (isSet(this.tables.never, t)) continue; // no mask allows these (next() clears banned ones)
      // A rejected token leaves the matcher as it was.
      if (this.m.acceptToken(t)) return { kind: 'token', token: t };
    }
    return { kind: 'miss' };
  }

  /** The first of `candidates` the mask allows, accepted; or what next() says of the state. */
  private async pickWithMask(candidates: readonly number[]): Promise<GrammarPick> {
    const next = await this.next();
    if (next.kind !== 'mask') return next;
    if (this.disposed) return { kind: 'dead' }; // the request ended while the mask was computed
    for (const t of candidates) {
      if (!isSet(next.bitmask, t)) continue;
      if (!this.m.acceptToken(t)) throw new Error(`the grammar's mask allows token ${t} but its matcher rejects it`);
      return { kind: 'token', token: t };
    }
    return { kind: 'miss' };
  }

  rollBack(n: number): void {
    if (!this.disposed) this.m.rollBack(n);
  }

  forcedText(): string {
    return this.disposed ? '' : this.m.findJumpForwardString();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.m.dispose();
  }
}

/** The grammar service of a loaded model (tokenizer bundle + native vocab size). */
export function grammarServiceFor(text: { tokenizer: GrammarTokenizer; stopTokenIds: Iterable<number> }, vocabSize: number): GrammarService {
  return new GrammarService({ tokenizer: text.tokenizer, vocabSize, stopTokenIds: text.stopTokenIds });
}
