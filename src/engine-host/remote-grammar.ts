// The grammar provider of the HTTP process when the engine runs in a child: response formats are
// compiled there (the engine needs each step's masks at hand), and matcher() answers with a handle
// to the child's matcher, so a format xgrammar refuses is still a 400 before anything is queued.
import { EngineUnavailableError } from '../errors/request-errors.js';
import type { GrammarHealth, GrammarProvider } from '../engine/grammar/grammar-service.js';
import type { RequestGrammarOptions } from '../engine/grammar/guarded-grammar.js';
import type { GrammarNext, RequestGrammar } from '../engine/grammar/request-grammar.js';
import type { GrammarSpec } from '../engine/grammar/grammar-spec.js';
import { fromWire, type ChildMessage, type ChildSnapshot } from './protocol.js';
import type { EngineSupervisor } from './supervisor.js';

/** A matcher that lives in the engine child; only RemoteEngine.submit uses it (it sends the handle). */
export class RemoteGrammarHandle implements RequestGrammar {
  private taken = false;

  constructor(
    readonly handle: number,
    /** The supervisor's generation of the child that holds the matcher. */
    readonly generation: number,
    private readonly drop: (handle: number) => void,
  ) {}

  /** The handle for a submit; after it, the child owns the matcher. */
  take(): number {
    this.taken = true;
    return this.handle;
  }

  next(): Promise<GrammarNext> {
    return Promise.reject(new Error('a remote grammar is stepped in the engine process'));
  }

  accept(): boolean {
    return false;
  }

  dispose(): void {
    if (this.taken) return;
    this.taken = true;
    this.drop(this.handle);
  }
}

export class RemoteGrammar implements GrammarProvider {
  private nextRid = 0;
  private readonly pending = new Map<number, { resolve: (g: RequestGrammar) => void; reject: (err: Error) => void; generation: number }>();
  private snapshot: ChildSnapshot | null = null;

  constructor(private readonly sup: EngineSupervisor) {}

  matcher(format: GrammarSpec, options: RequestGrammarOptions = {}): Promise<RequestGrammar> {
    const rid = ++this.nextRid;
    const generation = this.sup.generation;
    return new Promise((resolve, reject) => {
      if (!this.sup.send({ t: 'grammar', rid, format, options })) {
        reject(new EngineUnavailableError(`the engine is unavailable: ${this.sup.downReason ?? 'not started'}`, 'unhealthy', 5));
        return;
      }
      this.pending.set(rid, { resolve, reject, generation });
    });
  }

  health(): GrammarHealth {
    return this.snapshot?.grammar ?? { status: 'ok' };
  }

  onMessage(m: ChildMessage): void {
    if (m.t === 'snapshot') this.snapshot = m.snapshot;
    if (m.t !== 'grammar') return;
    const p = this.pending.get(m.rid);
    if (!p) return;
    this.pending.delete(m.rid);
    if (m.error !== undefined || m.handle === undefined) p.reject(fromWire(m.error ?? { kind: 'other', message: 'the engine process compiled no grammar' }));
    else {
      const { generation } = p;
      // A handle of a child that has died since has nothing to free.
      p.resolve(new RemoteGrammarHandle(m.handle, generation, (handle) => this.sup.generation === generation && this.sup.send({ t: 'grammar-drop', handle })));
    }
  }

  /** The child died: compilations in flight fail as the engine's requests do (503, retry). */
  onDown(reason: string): void {
    for (const p of this.pending.values()) p.reject(new EngineUnavailableError(`the engine is unavailable: ${reason}`, 'unhealthy', 5));
    this.pending.clear();
    this.snapshot = null;
  }
}
