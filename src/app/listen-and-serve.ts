// What both serve paths do once their models are open: listen (releasing the models if that fails) and
// stop in rollout order: unready first (still serving) for the drain delay, then no new requests, drain.
import type { RapidServer } from '../server/server.js';

export interface Listening {
  url: string;
  /** Graceful stop, once: in-flight requests finish (or fail after graceMs), then the models are released. */
  close(graceMs: number): Promise<void>;
}

export interface ListenOptions {
  host?: string;
  port?: number;
  /** Seconds /health/ready answers 503 before the listener closes (load balancers notice first). */
  drainDelay?: number;
}

export async function listenAndServe(server: RapidServer, opts: ListenOptions, release: () => Promise<void>): Promise<Listening> {
  let addr;
  try {
    addr = await server.listen(opts.port ?? 8000, opts.host ?? '127.0.0.1');
  } catch (err) {
    await release();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    url: addr.url,
    close(graceMs) {
      closing ??= (async () => {
        server.markUnready();
        if (opts.drainDelay) await new Promise((r) => setTimeout(r, opts.drainDelay! * 1000));
        await server.close(graceMs);
      })().finally(release);
      return closing;
    },
  };
}
