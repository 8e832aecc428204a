// Several models behind one server: each loads on its first request (concurrent requests share
// the load), unpinned idle ones are evicted least recently used first to stay within a byte
// budget, and a reload or a new spec swaps the engine while the old one drains. Every wait is
// bounded; a model with requests in flight is never evicted or closed before they end.
import type { EngineHealth } from '../engine/engine.js';
import { formatBytes } from '../models/format-bytes.js';
import { badRequest, HttpError, notFound } from './http-errors.js';
import type { EndpointLease, ModelCard, ModelRouter, ServedEndpoint } from './model-routes.js';

/** A configured model, loaded or not. */
export interface PoolEntryConfig {
  /** The first name: what responses carry and the `model` label of its metrics. */
  readonly id: string;
  /** Every name clients may send, id first. */
  readonly names: readonly string[];
  readonly spec: string;
  /** Never evicted to make room (an explicit unload still unloads it). */
  readonly pin: boolean;
}

/** What the loader hands back: the endpoint and what it holds. */
export interface PoolModel {
  readonly endpoint: ServedEndpoint;
  /** Bytes it holds once loaded (weights + KV pool, host and device together). */
  readonly bytes: number;
  /** Stops the engine (requests still running after graceMs fail) and frees the model. */
  close(graceMs: number): Promise<void>;
}

export interface PoolLoader {
  /** Bytes a model will hold before it loads: its weight files + its KV budget. */
  estimate(entry: PoolEntryConfig, spec: string): Promise<number>;
  load(entry: PoolEntryConfig, spec: string): Promise<PoolModel>;
}

export interface PoolOptions {
  /** Budget of all loaded models together (their estimates while they load); none: no eviction. */
  maxLoadedBytes?: number;
  /** How long a request waits for its model: room in the budget plus the load. */
  loadTimeoutMs: number;
  /** How long in-flight requests get to finish when their engine is unloaded or swapped. */
  drainTimeoutMs: number;
  /** --accept-any-model-name: a name no entry has goes to the first model. */
  acceptAnyName?: boolean;
  log?: (line: string) => void;
}

interface Instance {
  readonly model: PoolModel;
  readonly spec: string;
  /** Its estimate, reserved until it is installed (install() drops it in the same turn). */
  reserved: number;
  leases: number;
  /** Resolved when leases drop to 0. */
  idle: (() => void)[];
}

interface Entry {
  readonly cfg: PoolEntryConfig;
  spec: string;
  current: Instance | null;
  /** The first load in progress, shared by every request that needs it. */
  loading: Promise<Instance> | null;
  /** Bytes reserved for loads in progress (their estimates). */
  reserved: number;
  /** Old instances still finishing their requests; their bytes still count. */
  retiring: Set<Instance>;
  lastUsed: number;
  /** While its load waits for room: why (a request that times out then says so). */
  noRoom: (() => HttpError) | null;
  /** Requests waiting for this model to load: a fresh instance is not evicted before they lease it. */
  wanted: number;
  /** load/unload/swap of this model run one at a time. */
  admin: Promise<unknown>;
}

const unavailable = (message: string, code: string, retryAfter = 5) => new HttpError(503, message, 'server_error', null, code, { 'retry-after': String(retryAfter) });

/** Rejects with `onTimeout()` once `deadline` (ms since epoch) passes; the work itself goes on. */
function withDeadline<T>(work: Promise<T>, deadline: number, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(onTimeout()), Math.max(0, deadline - Date.now()));
    work.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e)),
    );
  });
}

export class ModelPool implements ModelRouter {
  private readonly entries: Entry[];
  private readonly byName = new Map<string, Entry>();
  /** Woken whenever bytes may have been freed (a release to idle, an unload, a failed load). */
  private changed: (() => void)[] = [];
  private closing = false;
  /** Unix seconds: what /v1/models says for a model not loaded yet. */
  private readonly created = Math.floor(Date.now() / 1000);

  constructor(
    configs: readonly PoolEntryConfig[],
    private readonly loader: PoolLoader,
    private readonly opts: PoolOptions,
  ) {
    if (configs.length === 0) throw new Error('a model pool needs at least one model');
    this.entries = configs.map((cfg) => ({ cfg, spec: cfg.spec, current: null, loading: null, reserved: 0, retiring: new Set(), lastUsed: 0, wanted: 0, noRoom: null, admin: Promise.resolve() }));
    for (const e of this.entries) {
      for (const n of e.cfg.names) {
        const other = this.byName.get(n);
        if (other && other !== e) throw new Error(`the name '${n}' is given to two models (${other.cfg.spec} and ${e.cfg.spec}); names must be unique`);
        this.byName.set(n, e);
      }
    }
  }

  /** Bytes held or reserved by every model. */
  usedBytes(): number {
    let sum = 0;
    for (const e of this.entries) {
      sum += (e.current?.model.bytes ?? 0) + e.reserved;
      for (const r of e.retiring) sum += r.model.bytes;
    }
    return sum;
  }

  async acquire(name: string | undefined): Promise<EndpointLease> {
    const entry = this.entryFor(name);
    const deadline = Date.now() + this.opts.loadTimeoutMs;
    entry.wanted++;
    try {
      for (;;) {
        if (this.closing) throw unavailable('the server is shutting down', 'shutting_down');
        const inst = entry.current;
        if (inst) return this.lease(entry, inst);
        await withDeadline(this.ensureLoaded(entry, deadline), deadline, () =>
          entry.noRoom?.() ?? unavailable(`the model '${entry.cfg.id}' did not load within ${this.opts.loadTimeoutMs / 1000} s (rapid serve --model-load-timeout); retry shortly`, 'model_loading', 10),
        );
      }
    } finally {
      entry.wanted--;
    }
  }

  loaded(): { label: string; endpoint: ServedEndpoint }[] {
    return this.entries.filter((e) => e.current).map((e) => ({ label: e.cfg.id, endpoint: e.current!.model.endpoint }));
  }

  cards(): ModelCard[] {
    return this.entries.flatMap((e) => e.cfg.names.map((n) => this.cardOf(e, n)));
  }

  card(name: string): ModelCard {
    const e = this.byName.get(name);
    if (!e) throw this.unknown(name);
    return this.cardOf(e, name);
  }

  contextLength(): number {
    return Math.max(0, ...this.loaded().map((l) => l.endpoint.model.contextLength));
  }

  health(): EngineHealth {
    for (const { label, endpoint } of this.loaded()) {
      const h = endpoint.engine.health();
      if (!h.ok) return { ok: false, reason: `${label}: ${h.reason ?? 'unhealthy'}` };
    }
    return { ok: true };
  }

  ready(): EngineHealth {
    for (const { label, endpoint } of this.loaded()) {
      const r = endpoint.engine.ready();
      if (!r.ok) return { ok: false, reason: `${label}: ${r.reason ?? 'not ready'}` };
    }
    return { ok: true };
  }

  /** POST /v1/models/{id}/load (body: optional {"spec"}: a hot swap to another checkpoint) and /unload. */
  admin(action: 'load' | 'unload', name: string, body: unknown): Promise<unknown> {
    const entry = this.byName.get(name);
    if (!entry) throw this.unknown(name);
    const spec = action === 'load' ? specOf(body) : undefined;
    if (action === 'unload' && body !== undefined && !(typeof body === 'object' && body !== null && Object.keys(body).length === 0)) {
      throw badRequest('POST /v1/models/{id}/unload takes no body fields', null, 'invalid_body');
    }
    const run = async () => {
      if (action === 'unload') await this.unload(entry);
      else await this.load(entry, spec);
      return { ...this.cardOf(entry, entry.cfg.id), spec: entry.spec };
    };
    const next = entry.admin.then(run, run);
    entry.admin = next.catch(() => undefined);
    return next;
  }

  /** Loads a model at startup (pinned ones): no request waits, so a model that does not fit fails at once. */
  async preload(name: string): Promise<void> {
    const entry = this.byName.get(name);
    if (!entry) throw this.unknown(name);
    if (!entry.current) await this.ensureLoaded(entry, Date.now());
  }

  async shutdown(graceMs: number): Promise<void> {
    this.closing = true;
    const deadline = Date.now() + graceMs;
    // A load in progress is closed when it lands (see ensureLoaded); it does not hold the shutdown.
    await Promise.all(
      this.entries.map(async (e) => {
        const inst = e.current;
        e.current = null;
        await Promise.all([...(inst ? [this.retire(e, inst, deadline)] : []), ...[...e.retiring].map((r) => this.waitIdle(r, deadline))]);
      }),
    );
  }

  private entryFor(name: string | undefined): Entry {
    if (name === undefined) return this.entries[0]!;
    const e = this.byName.get(name);
    if (e) return e;
    if (this.opts.acceptAnyName) return this.entries[0]!;
    throw this.unknown(name);
  }

  private unknown(name: string): HttpError {
    const names = this.entries.flatMap((e) => e.cfg.names).map((n) => `'${n}'`).join(', ');
    return notFound(`The model '${name}' does not exist; this server serves ${names}`, 'model_not_found');
  }

  private cardOf(e: Entry, id: string): ModelCard {
    const m = e.current?.model.endpoint.model;
    return {
      id,
      object: 'model',
      created: m?.created ?? this.created,
      owned_by: 'rapid',
      ...(m ? { max_model_len: m.contextLength } : {}),
      status: e.current ? 'loaded' : e.loading ? 'loading' : 'available',
      pinned: e.cfg.pin,
    };
  }

  private lease(entry: Entry, inst: Instance): EndpointLease {
    inst.leases++;
    entry.lastUsed = Date.now();
    let released = false;
    return {
      endpoint: inst.model.endpoint,
      release: () => {
        if (released) return;
        released = true;
        entry.lastUsed = Date.now();
        if (--inst.leases === 0) {
          for (const wake of inst.idle.splice(0)) wake();
          this.notify();
        }
      },
    };
  }

  private notify(): void {
    for (const wake of this.changed.splice(0)) wake();
  }

  /** The entry's first load: shared by everyone who asks while it runs; a failure clears it for a retry. */
  private ensureLoaded(entry: Entry, deadline: number, spec = entry.spec): Promise<Instance> {
    entry.loading ??= this.loadInstance(entry, spec, deadline)
      .then((inst) => {
        this.install(entry, inst);
        entry.spec = inst.spec;
        if (this.closing) {
          entry.current = null;
          void inst.model.close(0);
          throw unavailable('the server is shutting down', 'shutting_down');
        }
        return inst;
      })
      .finally(() => {
        entry.loading = null;
        this.notify();
      });
    return entry.loading;
  }

  /** Makes room, reserves the estimate, loads; the reservation becomes the model's own bytes. */
  private async loadInstance(entry: Entry, spec: string, deadline: number): Promise<Instance> {
    let estimate: number;
    try {
      estimate = await this.loader.estimate(entry.cfg, spec); // resolves the spec: a bad one fails here
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      this.opts.log?.(`loading ${entry.cfg.id} (${spec}) failed: ${why}`);
      if (spec === entry.cfg.spec) throw new HttpError(500, `the model '${entry.cfg.id}' failed to load: ${why}`, 'server_error', null, 'model_load_failed');
      throw badRequest(`cannot load '${spec}' as '${entry.cfg.id}': ${why}`, 'spec', 'invalid_spec');
    }
    const reserved = await this.reserveRoom(entry, estimate, deadline);
    const started = Date.now();
    let model: PoolModel;
    try {
      model = await this.loader.load(entry.cfg, spec);
    } catch (err) {
      entry.reserved -= reserved;
      const why = err instanceof Error ? err.message : String(err);
      this.opts.log?.(`loading ${entry.cfg.id} (${spec}) failed: ${why}`);
      throw new HttpError(500, `the model '${entry.cfg.id}' failed to load: ${why}`, 'server_error', null, 'model_load_failed');
    }
    this.opts.log?.(`loaded ${entry.cfg.id} (${spec}) in ${((Date.now() - started) / 1000).toFixed(1)} s: ${formatBytes(model.bytes)} (estimated ${formatBytes(estimate)})`);
    entry.lastUsed = Date.now();
    return { model, spec, reserved, leases: 0, idle: [] };
  }

  /** Makes a loaded instance the entry's current one; its bytes replace its reservation in the same turn. */
  private install(entry: Entry, inst: Instance): void {
    entry.reserved -= inst.reserved;
    inst.reserved = 0;
    entry.current = inst;
    this.trim(entry);
  }

  /** A model larger than its estimate can leave the pool over budget: idle unpinned others go (no waiting). */
  private trim(keep: Entry): void {
    const max = this.opts.maxLoadedBytes;
    if (max === undefined) return;
    while (this.usedBytes() > max) {
      const victim = this.entries
        .filter((e) => e !== keep && e.current && e.current.leases === 0 && e.wanted === 0 && !e.cfg.pin)
        .sort((a, b) => a.lastUsed - b.lastUsed)[0];
      if (!victim) {
        this.opts.log?.(`over --max-loaded-bytes (${formatBytes(this.usedBytes())} of ${formatBytes(max)}): ${keep.cfg.id} is larger than its estimate and nothing idle can be unloaded`);
        return;
      }
      const inst = victim.current!;
      victim.current = null;
      this.opts.log?.(`evicting ${victim.cfg.id}: ${keep.cfg.id} holds more than its estimate`);
      void this.retire(victim, inst, Date.now());
    }
  }

  /** Evicts idle unpinned models, least recently used first, until `bytes` more fit, and reserves
   *  them for the entry; waits (until the deadline) for a busy one to go idle when nothing can go now. */
  private async reserveRoom(entry: Entry, bytes: number, deadline: number): Promise<number> {
    const max = this.opts.maxLoadedBytes;
    if (max === undefined) return 0;
    if (bytes > max) {
      throw unavailable(`the model '${entry.cfg.id}' needs about ${formatBytes(bytes)} (weights + KV budget), more than --max-loaded-bytes ${formatBytes(max)}; raise the budget or lower its kv-cache-memory`, 'model_too_large', 60);
    }
    for (;;) {
      // Checked and taken in one turn: two loads never both count on the same room.
      if (this.usedBytes() + bytes <= max) {
        entry.reserved += bytes;
        return bytes;
      }
      const victim = this.entries
        .filter((e) => e !== entry && e.current && e.current.leases === 0 && e.wanted === 0 && !e.cfg.pin)
        .sort((a, b) => a.lastUsed - b.lastUsed)[0];
      if (victim) {
        const inst = victim.current!;
        victim.current = null;
        this.opts.log?.(`evicting ${victim.cfg.id} (idle, least recently used) to load ${entry.cfg.id}`);
        await this.retire(victim, inst, Date.now());
        continue;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw this.noRoom(entry, bytes, max);
      entry.noRoom = () => this.noRoom(entry, bytes, max);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.changed.push(() => (clearTimeout(t), resolve()));
      }).finally(() => (entry.noRoom = null));
    }
  }

  private noRoom(entry: Entry, bytes: number, max: number): HttpError {
    const held = this.entries
      .filter((e) => e.current || e.reserved > 0 || e.retiring.size > 0)
      .map((e) => `${e.cfg.id} (${e.cfg.pin ? 'pinned' : e.current && e.current.leases > 0 ? `${e.current.leases} in flight` : e.current ? 'loaded' : 'loading or draining'})`);
    return unavailable(
      `no room to load '${entry.cfg.id}' (about ${formatBytes(bytes)}) within --max-loaded-bytes ${formatBytes(max)}: ${formatBytes(this.usedBytes())} is held by ${held.join(', ')}; retry when they are idle, or raise the budget`,
      'model_memory_budget',
    );
  }

  /** Unload: new requests no longer reach it (a later one loads it again); in-flight ones finish. */
  private async unload(entry: Entry): Promise<void> {
    if (entry.loading) await entry.loading.catch(() => undefined);
    const inst = entry.current;
    if (!inst) return;
    entry.current = null;
    await this.retire(entry, inst, Date.now() + this.opts.drainTimeoutMs);
    this.opts.log?.(`unloaded ${entry.cfg.id}`);
  }

  /** Load, or (already loaded) swap: the new engine loads beside the old one, takes every new
   *  request from the moment it is ready, and the old one closes once its requests end. */
  private async load(entry: Entry, spec: string | undefined): Promise<void> {
    const deadline = Date.now() + this.opts.loadTimeoutMs;
    if (entry.loading) await entry.loading.catch(() => undefined);
    if (!entry.current) {
      await withDeadline(this.ensureLoaded(entry, deadline, spec), deadline, () => unavailable(`the model '${entry.cfg.id}' is still loading after ${this.opts.loadTimeoutMs / 1000} s`, 'model_loading', 10));
      return;
    }
    const next = await this.loadInstance(entry, spec ?? entry.spec, deadline);
    const old = entry.current;
    this.install(entry, next);
    if (this.closing) {
      entry.current = null;
      await next.model.close(0);
      throw unavailable('the server is shutting down', 'shutting_down');
    }
    entry.spec = next.spec;
    this.opts.log?.(`swapped ${entry.cfg.id} to ${next.spec}; the previous engine drains`);
    if (old) await this.retire(entry, old, Date.now() + this.opts.drainTimeoutMs);
  }

  /** Waits (until the deadline) for an instance's requests to end, then closes it. */
  private async retire(entry: Entry, inst: Instance, deadline: number): Promise<void> {
    entry.retiring.add(inst);
    try {
      await this.waitIdle(inst, deadline);
      await inst.model.close(Math.max(0, deadline - Date.now()));
    } finally {
      entry.retiring.delete(inst);
      this.notify();
    }
  }

  private waitIdle(inst: Instance, deadline: number): Promise<void> {
    if (inst.leases === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, Math.max(0, deadline - Date.now()));
      inst.idle.push(() => (clearTimeout(t), resolve()));
    });
  }
}

function specOf(body: unknown): string | undefined {
  if (body === undefined) return undefined;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badRequest('the body of POST /v1/models/{id}/load must be a JSON object', null, 'invalid_body');
  const extra = Object.keys(body).filter((k) => k !== 'spec');
  if (extra.length > 0) throw badRequest(`unknown field(s) ${extra.join(', ')}: POST /v1/models/{id}/load takes only "spec" (a model directory, alias or org/name)`, extra[0]!, 'unknown_field');
  const spec = (body as { spec?: unknown }).spec;
  if (spec === undefined) return undefined;
  if (typeof spec !== 'string' || spec.trim() === '') throw badRequest('spec must be a non-empty string (a model directory, alias or org/name)', 'spec', 'invalid_type');
  return spec;
}
