// The model pool's waits and hand-overs, step by step, with a loader the test resolves by hand:
// one shared load, a failure reaching every waiter, a bounded wait that leaves the load running,
// eviction that never takes a model with a lease, and a swap that closes the old engine only once
// its last request ends. (Over real HTTP and real checkpoints: multi-model.test.ts.)
import { describe, expect, it } from 'vitest';
import type { EngineLike } from '../../src/engine/engine.js';
import { ModelPool, type PoolEntryConfig, type PoolLoader, type PoolModel } from '../../src/server/model-pool.js';
import type { ServedModel } from '../../src/server/served-model.js';
import { HttpError } from '../../src/server/http-errors.js';

interface Pending {
  id: string;
  spec: string;
  resolve(bytes?: number): void;
  reject(err: Error): void;
}

/** A loader whose loads wait for the test; each loaded model records when it is closed. */
function manualLoader(sizes: Record<string, number>) {
  const pending: Pending[] = [];
  const closed: string[] = [];
  const loader: PoolLoader = {
    estimate: async (entry) => sizes[entry.id]!,
    load: (entry, spec) =>
      new Promise<PoolModel>((resolve, reject) => {
        pending.push({
          id: entry.id,
          spec,
          reject,
          resolve: (bytes = sizes[entry.id]!) =>
            resolve({
              endpoint: { model: { id: entry.id, contextLength: 64 } as ServedModel, engine: { health: () => ({ ok: true }) } as EngineLike },
              bytes,
              close: async () => void closed.push(`${entry.id}@${spec}`),
            }),
        });
      }),
  };
  return { loader, pending, closed };
}

const entries = (...ids: string[]): PoolEntryConfig[] => ids.map((id) => ({ id, names: [id], spec: `${id}-v1`, pin: false }));
const tick = () => new Promise((r) => setTimeout(r, 5));

describe('ModelPool', () => {
  it('shares one load among concurrent requests; a failure reaches each, and the next request loads again', async () => {
    const { loader, pending } = manualLoader({ a: 10 });
    const pool = new ModelPool(entries('a'), loader, { loadTimeoutMs: 5000, drainTimeoutMs: 1000 });
    const waits = [pool.acquire('a'), pool.acquire('a'), pool.acquire(undefined)].map((p) => p.catch((e: unknown) => e));
    await tick();
    expect(pending).toHaveLength(1);
    expect(pool.card('a').status).toBe('loading');
    pending[0]!.reject(new Error('bad weights'));
    for (const e of await Promise.all(waits)) {
      expect(e).toBeInstanceOf(HttpError);
      expect((e as HttpError).code).toBe('model_load_failed');
      expect((e as HttpError).message).toBe("the model 'a' failed to load: bad weights");
    }
    expect(pool.card('a').status).toBe('available');
    const again = pool.acquire('a');
    await tick();
    expect(pending).toHaveLength(2);
    pending[1]!.resolve();
    const lease = await again;
    expect(lease.endpoint.model.id).toBe('a');
    expect(pool.card('a').status).toBe('loaded');
  });

  it('bounds the wait for a load; the load goes on and serves the next request', async () => {
    const { loader, pending } = manualLoader({ a: 10 });
    const pool = new ModelPool(entries('a'), loader, { loadTimeoutMs: 30, drainTimeoutMs: 1000 });
    await expect(pool.acquire('a')).rejects.toMatchObject({ status: 503, code: 'model_loading' });
    pending[0]!.resolve();
    await tick();
    await expect(pool.acquire('a')).resolves.toBeDefined();
    expect(pending).toHaveLength(1);
  });

  it('never evicts a model with a request in flight: the next load waits for it to go idle', async () => {
    const { loader, pending, closed } = manualLoader({ a: 10, b: 10 });
    const pool = new ModelPool(entries('a', 'b'), loader, { maxLoadedBytes: 15, loadTimeoutMs: 5000, drainTimeoutMs: 1000 });
    const la = pool.acquire('a');
    await tick();
    pending[0]!.resolve();
    const leaseA = await la;
    const lb = pool.acquire('b');
    await tick();
    expect(pending).toHaveLength(1); // b waits for room
    leaseA.release();
    await tick();
    expect(closed).toEqual(['a@a-v1']);
    expect(pending).toHaveLength(2);
    pending[1]!.resolve();
    await expect(lb).resolves.toBeDefined();
    expect(pool.usedBytes()).toBe(10);
  });

  it('swaps: new requests reach the new engine at once, the old one closes after its last request', async () => {
    const { loader, pending, closed } = manualLoader({ a: 10 });
    const pool = new ModelPool(entries('a'), loader, { loadTimeoutMs: 5000, drainTimeoutMs: 5000 });
    const first = pool.acquire('a');
    await tick();
    pending[0]!.resolve();
    const old = await first;
    const swap = pool.admin('load', 'a', { spec: 'a-v2' });
    await tick();
    expect(pending[1]!.spec).toBe('a-v2');
    const during = await pool.acquire('a');
    expect(during.endpoint).toBe(old.endpoint); // the old engine serves while v2 loads
    pending[1]!.resolve();
    await tick();
    const fresh = await pool.acquire('a');
    expect(fresh.endpoint).not.toBe(old.endpoint);
    old.release();
    await tick();
    expect(closed).toEqual([]); // one request still runs on the old engine
    during.release();
    await swap;
    expect(closed).toEqual(['a@a-v1']);
    expect(pool.usedBytes()).toBe(10);
  });

  it('keeps the spec it had when a load of another one fails', async () => {
    const { loader, pending } = manualLoader({ a: 10 });
    const pool = new ModelPool(entries('a'), loader, { loadTimeoutMs: 5000, drainTimeoutMs: 1000 });
    const swap = pool.admin('load', 'a', { spec: 'a-broken' }).catch((e: unknown) => e);
    await tick();
    expect(pending[0]!.spec).toBe('a-broken');
    pending[0]!.reject(new Error('no such checkpoint'));
    expect(await swap).toMatchObject({ status: 500, code: 'model_load_failed' });
    const next = pool.acquire('a');
    await tick();
    expect(pending[1]!.spec).toBe('a-v1');
    pending[1]!.resolve();
    await expect(next).resolves.toBeDefined();
  });

  it('refuses two models sharing a name', () => {
    const { loader } = manualLoader({});
    expect(() => new ModelPool([...entries('a'), { id: 'b', names: ['b', 'a'], spec: 'b', pin: false }], loader, { loadTimeoutMs: 1, drainTimeoutMs: 1 })).toThrow(/the name 'a' is given to two models/);
  });
});
