// The server's EngineLike when the engine runs in a child process: submits cross the channel, each
// step's output comes back as one message and is fanned out to the requests' event queues. When the
// child dies every in-flight request ends with an error (none hangs) and, until a new child serves,
// submits are refused with 503 and health says why. Stats are the last snapshot the child pushed.
import { EngineRequestError } from '../engine/engine-errors.js';
import type { EngineHealth, EngineLike, EngineStats, RequestHandle, SubmitOptions } from '../engine/engine.js';
import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';
import { EventQueue, type EngineDelta, type EngineEvent } from '../engine/request.js';
import { fromWire, type ChildMessage, type ChildSnapshot } from './protocol.js';
import { RemoteGrammarHandle } from './remote-grammar.js';
import type { EngineSupervisor, RestartTiming } from './supervisor.js';

interface Live {
  queue: EventQueue<EngineEvent>;
  /** Settles the handle's `accepted` (null once it has). */
  settle: { resolve: () => void; reject: (err: Error) => void } | null;
}

/** Seconds a client is told to wait while the engine process restarts. */
const RESTART_RETRY_AFTER_S = 5;

export class RemoteEngine implements EngineLike {
  readonly contextLength: number;
  private readonly live = new Map<string, Live>();
  private snapshot: ChildSnapshot;
  private closing = false;
  private nextId = 0;

  constructor(
    private readonly sup: EngineSupervisor,
    contextLength: number,
    snapshot: ChildSnapshot,
  ) {
    this.contextLength = contextLength;
    this.snapshot = snapshot;
  }

  submit(o: SubmitOptions): RequestHandle {
    const refuse = (err: Error): never => {
      o.grammar?.dispose(); // refused: nobody else will free it
      throw err;
    };
    if (this.closing) refuse(new EngineUnavailableError('the server is shutting down', 'shutting_down'));
    const down = this.sup.downReason;
    if (down !== null) refuse(new EngineUnavailableError(`the engine is unavailable: ${down}`, 'unhealthy', RESTART_RETRY_AFTER_S));
    const id = o.id ?? `req-${++this.nextId}`;
    if (this.live.has(id)) refuse(new InvalidRequestError(`request id ${id} is already in use`, 'id'));
    let grammar: number | undefined;
    if (o.grammar !== undefined) {
      if (!(o.grammar instanceof RemoteGrammarHandle)) refuse(new Error('an engine process takes grammars from its RemoteGrammar only'));
      const g = o.grammar as RemoteGrammarHandle;
      if (g.generation !== this.sup.generation) refuse(new EngineUnavailableError('the engine process restarted while the request was prepared; retry', 'unhealthy', 1));
      grammar = g.take();
    }
    const queue = new EventQueue<EngineEvent>();
    let settle: Live['settle'] = null;
    const accepted = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
    accepted.catch(() => undefined); // the events carry the same error to whoever does not await this
    const entry: Live = { queue, settle };
    this.live.set(id, entry);
    const { grammar: _local, id: _id, ...options } = o;
    if (!this.sup.send({ t: 'submit', id, options, grammar })) {
      this.live.delete(id); // the child went away since downReason was read
      throw new EngineUnavailableError(`the engine is unavailable: ${this.sup.downReason ?? 'its process is gone'}`, 'unhealthy', RESTART_RETRY_AFTER_S);
    }
    return {
      id,
      numPromptTokens: o.promptIds.length,
      events: queue,
      accepted,
      abort: () => {
        if (this.live.get(id) !== entry) return;
        this.live.delete(id);
        entry.settle?.resolve();
        queue.end(); // ends without a done event, as an aborted request does
        this.sup.send({ t: 'abort', id });
      },
    };
  }

  /** The engine child's process id (null while none runs). */
  get pid(): number | null {
    return this.sup.pid;
  }

  get lastRestart(): RestartTiming | null {
    return this.sup.lastRestart;
  }

  /** Messages of the child (the supervisor forwards all but its own). */
  onMessage(m: ChildMessage): void {
    switch (m.t) {
      case 'accepted': {
        const e = this.live.get(m.id);
        e?.settle?.resolve();
        if (e) e.settle = null;
        return;
      }
      case 'rejected':
        this.fail(m.id, fromWire(m.error));
        return;
      case 'step':
        for (const [id, text, token, logprob, top] of m.deltas) {
          const q = this.live.get(id)?.queue;
          if (!q) continue; // aborted here meanwhile
          const d: EngineDelta = { type: 'delta', text, token };
          if (logprob !== undefined) d.logprob = logprob;
          if (top !== undefined) d.topLogprobs = top;
          q.push(d);
        }
        m.done.forEach((ev, i) => {
          const id = m.doneIds[i]!;
          const e = this.live.get(id);
          if (!e) return;
          this.live.delete(id);
          e.queue.push(ev);
          e.queue.end();
        });
        for (const [id, err] of m.failed) this.fail(id, fromWire(err));
        return;
      case 'snapshot':
        this.snapshot = m.snapshot;
        return;
    }
  }

  /** The child died: every request it held is lost. Not yet queued there: 503 (retry); streaming: an error event. */
  onDown(reason: string): void {
    for (const [id, e] of [...this.live]) {
      this.live.delete(id);
      if (e.settle) {
        const err = new EngineUnavailableError(`the engine is unavailable: ${reason}`, 'unhealthy', RESTART_RETRY_AFTER_S);
        e.settle.reject(err);
        e.queue.end(err);
      } else e.queue.end(new EngineRequestError(`${reason}; this request was lost`, 'engine_crashed'));
    }
  }

  onUp(snapshot: ChildSnapshot): void {
    this.snapshot = snapshot;
  }

  private fail(id: string, err: Error): void {
    const e = this.live.get(id);
    if (!e) return;
    this.live.delete(id);
    e.settle?.reject(err);
    e.queue.end(err);
  }

  health(): EngineHealth {
    const down = this.sup.downReason;
    if (down !== null) return { ok: false, reason: down };
    return this.snapshot.health;
  }

  ready(): EngineHealth {
    if (this.closing) return { ok: false, reason: 'shutting down' };
    const h = this.health();
    return h.ok ? this.snapshot.ready : h;
  }

  stats(): EngineStats {
    const down = this.sup.downReason;
    const s = this.snapshot.stats;
    return down === null ? s : { ...s, healthy: false, unhealthyReason: down, waiting: 0, running: 0 };
  }

  /** The child drains for graceMs and exits; whatever it did not finish fails here. */
  async shutdown(graceMs: number): Promise<void> {
    this.closing = true;
    await this.sup.shutdown(graceMs);
    for (const id of [...this.live.keys()]) this.fail(id, new EngineRequestError('the server shut down before this request finished', 'shutdown'));
  }
}
