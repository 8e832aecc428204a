// `rapid serve --data-parallel N`: N engine processes (one per GPU) behind one HTTP endpoint. Each
// request goes to one engine (prefix-router.ts: prefix affinity under bounded loads); grammars are
// compiled in the engine that runs the request, so a constrained request picks its engine first.
import { EngineUnavailableError } from '../errors/request-errors.js';
import type { EngineHealth, EngineLike, EngineStats, RequestHandle, SubmitOptions } from '../engine/engine.js';
import type { GrammarHealth, GrammarProvider } from '../engine/grammar/grammar-service.js';
import type { RequestGrammarOptions } from '../engine/grammar/guarded-grammar.js';
import type { GrammarNext, RequestGrammar } from '../engine/grammar/request-grammar.js';
import type { GrammarSpec } from '../engine/grammar/grammar-spec.js';
import type { EngineEvent } from '../engine/request.js';
import { startEngineHost, type EngineHost } from './engine-host.js';
import type { ChildInit } from './protocol.js';
import { prefixBlockHashes, PrefixRouter } from './prefix-router.js';

/** A response format not compiled yet: the engine chosen for the request compiles it. */
class DeferredGrammar implements RequestGrammar {
  constructor(
    readonly format: GrammarSpec,
    readonly options: RequestGrammarOptions,
  ) {}

  next(): Promise<GrammarNext> {
    return Promise.reject(new Error('a deferred grammar is compiled by the engine that runs the request'));
  }

  accept(): boolean {
    return false;
  }

  dispose(): void {}
}

/** The grammar provider of a data-parallel server: matchers are compiled on submit, in the chosen engine. */
export class DataParallelGrammar implements GrammarProvider {
  constructor(private readonly hosts: readonly EngineHost[]) {}

  matcher(format: GrammarSpec, options: RequestGrammarOptions = {}): Promise<RequestGrammar> {
    return Promise.resolve(new DeferredGrammar(format, options));
  }

  health(): GrammarHealth {
    return this.hosts.map((h) => h.grammar.health()).find((g) => g.status !== 'ok') ?? { status: 'ok' };
  }
}

/** Sums engine stats field by field; ratios, maxima and flags are fixed after. */
function sum<T>(values: readonly T[]): T {
  const first = values[0]!;
  if (typeof first === 'number') return (values as readonly number[]).reduce((a, b) => a + b, 0) as T;
  if (first === null || typeof first !== 'object') return first;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(first)) out[k] = sum(values.map((v) => (v as Record<string, unknown>)[k]));
  return out as T;
}

export class DataParallelEngine implements EngineLike {
  readonly contextLength: number;
  private readonly router = new PrefixRouter();
  /** Requests each engine holds that have not ended (the router's load). */
  private readonly open: number[];
  /** Requests routed to each engine since start. */
  readonly routed: number[];

  constructor(private readonly hosts: readonly EngineHost[]) {
    this.contextLength = hosts[0]!.engine.contextLength;
    this.open = hosts.map(() => 0);
    this.routed = hosts.map(() => 0);
  }

  submit(o: SubmitOptions): RequestHandle {
    const available = this.hosts.map((h) => h.engine.health().ok);
    const i = this.router.pick(prefixBlockHashes(o.promptIds, o.cacheSalt), this.open, available);
    if (i < 0) {
      o.grammar?.dispose();
      throw new EngineUnavailableError(`no engine is available: ${this.hosts.map((h) => h.engine.health().reason).join('; ')}`, 'unhealthy', 5);
    }
    const host = this.hosts[i]!;
    this.open[i]!++;
    this.routed[i]!++;
    let released = false;
    const release = () => {
      if (!released) (released = true), this.open[i]!--;
    };
    let inner: RequestHandle | null = null;
    let aborted = false;
    const deferred = o.grammar instanceof DeferredGrammar ? o.grammar : null;
    try {
      if (!deferred) inner = host.engine.submit(o);
    } catch (err) {
      release();
      throw err;
    }
    // A deferred grammar compiles in the chosen engine first (its refusal is the request's 400).
    const accepted = (async () => {
      if (deferred) {
        const g = await host.grammar.matcher(deferred.format, deferred.options);
        if (aborted) {
          g.dispose();
          return;
        }
        inner = host.engine.submit({ ...o, grammar: g });
      }
      await inner!.accepted;
    })();
    accepted.catch(release);
    return {
      id: o.id ?? inner?.id ?? '',
      numPromptTokens: o.promptIds.length,
      accepted,
      events: (async function* (): AsyncGenerator<EngineEvent> {
        try {
          await accepted;
          if (inner) yield* inner.events;
        } finally {
          release();
        }
      })(),
      abort: () => {
        aborted = true;
        inner?.abort();
        release();
      },
    };
  }

  /** Each engine process's id (null while one restarts). */
  hostPids(): (number | null)[] {
    return this.hosts.map((h) => h.supervisor.pid);
  }

  health(): EngineHealth {
    const all = this.hosts.map((h) => h.engine.health());
    // Serving while any engine serves: requests are routed around one that restarts.
    return all.some((h) => h.ok) ? { ok: true } : { ok: false, reason: all.map((h, i) => `engine ${i}: ${h.reason}`).join('; ') };
  }

  ready(): EngineHealth {
    const all = this.hosts.map((h) => h.engine.ready());
    return all.some((h) => h.ok) ? { ok: true } : { ok: false, reason: all.map((h, i) => `engine ${i}: ${h.reason}`).join('; ') };
  }

  stats(): EngineStats {
    const all = this.hosts.map((h) => h.engine.stats());
    const s = sum(all);
    const healthy = all.filter((x) => x.healthy);
    return {
      ...s,
      healthy: healthy.length > 0,
      unhealthyReason: healthy.length > 0 ? null : all.map((x) => x.unhealthyReason).join('; '),
      draining: all.every((x) => x.draining),
      contextLength: this.contextLength,
      kv: { ...s.kv, blockSize: all[0]!.kv.blockSize, usage: s.kv.numBlocks > 0 ? s.kv.usedBlocks / s.kv.numBlocks : 0 },
      prefixCache: { ...s.prefixCache, enabled: all[0]!.prefixCache.enabled, hitRate: s.prefixCache.queryTokens > 0 ? s.prefixCache.hitTokens / s.prefixCache.queryTokens : 0 },
      lastStepMs: Math.max(...all.map((x) => x.lastStepMs)),
    };
  }

  async shutdown(graceMs: number): Promise<void> {
    await Promise.all(this.hosts.map((h) => h.engine.shutdown(graceMs)));
  }
}

export interface DataParallelHost {
  hosts: EngineHost[];
  engine: DataParallelEngine;
  grammar: DataParallelGrammar;
  /** Stops every engine process. */
  stop(): Promise<void>;
}

/**
 * Starts `n` engine processes on the same model, all at once; `envOf(i)` is engine i's extra
 * environment (its GPU). If one fails to load, the others are stopped and the error rejects.
 */
export async function startDataParallel(dir: string, init: Omit<ChildInit, 'dir'>, n: number, envOf: (i: number) => Record<string, string>, log: (line: string) => void): Promise<DataParallelHost> {
  const started = await Promise.allSettled(Array.from({ length: n }, (_, i) => startEngineHost(dir, init, (line) => log(`engine ${i}: ${line}`), envOf(i))));
  const hosts = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await Promise.all(hosts.map((h) => h.supervisor.shutdown(0)));
    throw failed.reason;
  }
  return {
    hosts,
    engine: new DataParallelEngine(hosts),
    grammar: new DataParallelGrammar(hosts),
    stop: async () => void (await Promise.all(hosts.map((h) => h.supervisor.shutdown(0)))),
  };
}
