// Keeps one engine child alive: forks it, hands it the model, forwards its messages, and when it
// dies (a native abort, a CUDA error, a kill) says so and starts another with the same model. A
// crash loop backs off: the first restart is immediate, then 1 s, 2 s, 4 s ... up to 30 s.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { compiledWorker } from '../compiled-worker.js';
import type { NativeModelInfo } from '../native/types.js';
import type { ChildInit, ChildMessage, ChildSnapshot, ParentMessage } from './protocol.js';
import { INCARNATION_ENV } from './test-faults.js';

export const RESTART_BACKOFF = { firstMs: 1000, maxMs: 30_000, /** a child up this long resets the count */ stableMs: 10_000 };

/** Time of the last restart: from the crash to serving again; the new child's start (fork to
 *  ready) inside it; and the model load inside that. */
export interface RestartTiming {
  totalMs: number;
  startMs: number;
  loadMs: number;
}

export interface SupervisorEvents {
  /** Every message but ready, fatal and log. */
  message(m: ChildMessage): void;
  /** The child died; everything sent to it is lost. */
  down(reason: string): void;
  /** A child (the first or a restart) is serving. */
  up(info: NativeModelInfo, snapshot: ChildSnapshot): void;
}

type State = { kind: 'starting' } | { kind: 'up'; since: number } | { kind: 'down'; reason: string } | { kind: 'stopped' };

export class EngineSupervisor {
  private child: ChildProcess | null = null;
  private state: State = { kind: 'starting' };
  private incarnation = 0;
  private crashes = 0; // in a row
  private restartTimer: NodeJS.Timeout | null = null;
  private downAt = 0;
  lastRestart: RestartTiming | null = null;
  /** Children that died unasked. */
  restarts = 0;

  constructor(
    private readonly init: ChildInit,
    private readonly events: SupervisorEvents,
    private readonly log: (line: string) => void,
    /** Set in every child's environment (data parallel: the GPU it may see). */
    private readonly env: Readonly<Record<string, string>> = {},
  ) {}

  /** Starts the first child; rejects when it cannot load the model (no restarts for that). */
  start(): Promise<{ info: NativeModelInfo; snapshot: ChildSnapshot }> {
    return new Promise((resolve, reject) => this.spawn(resolve, reject));
  }

  /** The child's process id while there is one. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Changes with every child: handles a child gave out are only valid while it lives. */
  get generation(): number {
    return this.incarnation;
  }

  get up(): boolean {
    return this.state.kind === 'up';
  }

  /** Why requests cannot run now (null while a child serves). */
  get downReason(): string | null {
    switch (this.state.kind) {
      case 'up':
        return null;
      case 'down':
        return this.state.reason;
      case 'starting':
        return 'the engine process is starting';
      case 'stopped':
        return 'stopped';
    }
  }

  send(m: ParentMessage): boolean {
    if (this.state.kind !== 'up' || !this.child?.connected) return false;
    // A child that is dying may refuse the write (EPIPE): its exit fails what was sent.
    this.child.send(m, (err) => err && this.log(`engine process channel: ${err.message}`));
    return true;
  }

  /** Asks the child to drain for graceMs and exit; kills it if it does not. */
  async shutdown(graceMs: number): Promise<void> {
    const child = this.child;
    const wasUp = this.state.kind === 'up';
    this.state = { kind: 'stopped' };
    if (this.restartTimer) clearTimeout(this.restartTimer);
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    if (wasUp && child.connected) child.send({ t: 'shutdown', graceMs } satisfies ParentMessage, (err) => err && child.kill('SIGKILL'));
    else child.kill('SIGKILL');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs + 5000);
    await exited;
    clearTimeout(timer);
  }

  private spawn(resolveFirst?: (r: { info: NativeModelInfo; snapshot: ChildSnapshot }) => void, rejectFirst?: (err: Error) => void): void {
    const entry = fileURLToPath(compiledWorker(import.meta.url, 'engine-host/child.js', 'engine child'));
    const forkedAt = performance.now();
    const child = fork(entry, [], {
      serialization: 'advanced', // structured clone: typed arrays (pixels, positions) cross as they are
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, ...this.env, [INCARNATION_ENV]: String(this.incarnation++) },
    });
    child.on('error', (err) => this.log(`engine process: ${err.message}`));
    child.send({ t: 'init', init: this.init } satisfies ParentMessage, (err) => err && this.log(`engine process channel: ${err.message}`));
    this.child = child;
    if (this.state.kind !== 'down') this.state = { kind: 'starting' }; // a restart keeps saying why
    let ready = false;
    let fatal: string | null = null;
    child.on('message', (m: ChildMessage) => {
      if (m.t === 'log') return this.log(m.line);
      if (m.t === 'fatal') {
        fatal = m.message;
        return;
      }
      if (m.t === 'ready') {
        ready = true;
        if (this.state.kind === 'stopped') return;
        this.state = { kind: 'up', since: performance.now() };
        if (this.downAt > 0) {
          const t = { totalMs: Math.round(performance.now() - this.downAt), startMs: Math.round(performance.now() - forkedAt), loadMs: m.loadMs };
          this.lastRestart = t;
          this.log(`engine process serving again ${t.totalMs} ms after it died (the new process started in ${t.startMs} ms, ${t.loadMs} ms of it loading the model)`);
        }
        resolveFirst?.({ info: m.info, snapshot: m.snapshot });
        this.events.up(m.info, m.snapshot);
        return;
      }
      this.events.message(m);
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = null;
      const how = signal !== null ? `signal ${signal}` : `exit code ${code}`;
      if (this.state.kind === 'stopped') return;
      if (!ready && resolveFirst) {
        rejectFirst?.(new Error(fatal ?? `the engine process exited while loading the model (${how})`));
        this.state = { kind: 'stopped' };
        return;
      }
      this.onDeath(fatal !== null ? `${fatal} (${how})` : how, ready);
    });
  }

  private onDeath(how: string, wasReady: boolean): void {
    const st = this.state;
    if (st.kind === 'up' && performance.now() - st.since >= RESTART_BACKOFF.stableMs) this.crashes = 0;
    const delay = this.crashes === 0 ? 0 : Math.min(RESTART_BACKOFF.firstMs * 2 ** (this.crashes - 1), RESTART_BACKOFF.maxMs);
    this.crashes++;
    this.restarts++;
    if (wasReady) this.downAt = performance.now();
    const reason = `the engine process died (${how}); restarting${delay > 0 ? ` in ${delay / 1000} s` : ''} (${this.crashes} in a row)`;
    this.state = { kind: 'down', reason };
    this.log(reason);
    if (wasReady) this.events.down(reason);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.state.kind !== 'stopped') this.spawn();
    }, delay);
  }
}
