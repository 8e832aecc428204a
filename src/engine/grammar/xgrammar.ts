// Loads @mlc-ai/web-xgrammar in Node. Its bundle is UMD inside a "type": "module" package, so
// neither import nor require() can load it: it is compiled as CommonJS through node:module.
// Its C++ errors go to console.error and are thrown as a bare "Aborted()": we capture the text.
import { createRequire, Module } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';

/** The parts of the xgrammar API rapid uses. */
export interface XgTokenizerInfo {
  dispose(): void;
  getVocabSize(): number;
}
export interface XgCompiledGrammar {
  dispose(): void;
}
export interface XgGrammarCompiler {
  dispose(): void;
  compileJSONSchema(schema: string, anyWhitespace?: boolean, indent?: number, separators?: [string, string], strictMode?: boolean): Promise<XgCompiledGrammar>;
  compileGrammar(ebnf: string, rootRule?: string): Promise<XgCompiledGrammar>;
}
export interface XgGrammarMatcher {
  dispose(): void;
  acceptToken(tokenId: number): boolean;
  getNextTokenBitmask(): Promise<Int32Array>;
  isTerminated(): boolean;
  /** The characters every continuation starts with ('' when more than one path is open). */
  findJumpForwardString(): string;
  /** Undoes the last numTokens accepted tokens. */
  rollBack(numTokens: number): void;
}
export interface Xgrammar {
  /** xgrammar's JSON Schema to EBNF converter (exposed under Testings in the web build). */
  Testings: { _jsonSchemaToEBNF(schema: string, anyWhitespace?: boolean, indent?: number, separators?: [string, string], strictMode?: boolean): Promise<string> };
  TokenizerInfo: {
    createTokenizerInfo(vocab: string[], vocabType: string, prependSpace: boolean, vocabSize: number, stopTokenIds: number[]): Promise<XgTokenizerInfo>;
  };
  GrammarCompiler: { createGrammarCompiler(info: XgTokenizerInfo, cacheEnabled: boolean): Promise<XgGrammarCompiler> };
  GrammarMatcher: {
    createGrammarMatcher(compiled: XgCompiledGrammar, overrideStopTokens?: number[], terminateWithoutStopToken?: boolean, maxRollbackTokens?: number): Promise<XgGrammarMatcher>;
  };
}

interface CjsModule {
  filename: string;
  paths: string[];
  exports: unknown;
  _compile(source: string, filename: string): void;
}
type CjsModuleCtor = (new (id: string) => CjsModule) & { _nodeModulePaths(dir: string): string[] };

let loaded: Xgrammar | null = null;
let capture: string[] | null = null;

function loadBundle(): Xgrammar {
  const req = createRequire(import.meta.url);
  const file = req.resolve('@mlc-ai/web-xgrammar');
  const Ctor = Module as unknown as CjsModuleCtor;
  const m = new Ctor(file);
  m.filename = file;
  m.paths = Ctor._nodeModulePaths(dirname(file));
  m._compile(readFileSync(file, 'utf8'), file);
  return m.exports as Xgrammar;
}

/** The xgrammar module; its wasm is embedded in the bundle, so nothing is fetched. */
export function xgrammar(): Xgrammar {
  loaded ??= loadBundle();
  return loaded;
}

/**
 * Runs the first call into xgrammar (which instantiates its wasm and binds console.error as its
 * error printer) with a console.error that collects while `capturing` runs, then restores it.
 */
export async function initWithErrorSink<T>(fn: () => Promise<T>): Promise<T> {
  const original = console.error;
  console.error = (...args: unknown[]): void => {
    if (capture !== null) capture.push(args.map(String).join(' '));
    else original(...args);
  };
  try {
    return await fn();
  } finally {
    console.error = original;
  }
}

/**
 * A WebAssembly trap (out-of-bounds access, unreachable, a stack overflow inside wasm, an abort
 * with no reason printed): the instance's memory can no longer be trusted and it must be replaced.
 */
export class XgrammarTrap extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'XgrammarTrap';
  }
}

const TRAP_TEXT = /memory access out of bounds|unreachable|table index|call stack|out of memory|null function/i;

/** Whether an error thrown by a call into xgrammar (that printed nothing) is a trap. */
export function isTrap(err: unknown): boolean {
  if (err instanceof XgrammarTrap) return true;
  const message = err instanceof Error ? err.message : String(err);
  return err instanceof WebAssembly.RuntimeError || err instanceof RangeError || TRAP_TEXT.test(message);
}

/**
 * Runs fn; when it throws, the error carries what xgrammar printed (its real reason). A failure with
 * nothing printed that looks like a trap is thrown as XgrammarTrap; one xgrammar explained (its C++
 * checks print, then abort) leaves the instance usable.
 */
export async function capturing<T>(fn: () => Promise<T>): Promise<T> {
  const prev = capture;
  const lines: string[] = [];
  capture = lines;
  try {
    return await fn();
  } catch (err) {
    const printed = lines
      .filter((l) => !l.startsWith('Aborted('))
      .map((l) => l.replace(/^\[FATAL\]\s*\S*:\d+:\s*/, ''))
      .join('; ');
    const message = err instanceof Error ? err.message : String(err);
    if (printed === '' && (isTrap(err) || message.startsWith('Aborted('))) throw new XgrammarTrap(message);
    throw new Error(printed || message);
  } finally {
    capture = prev;
  }
}
