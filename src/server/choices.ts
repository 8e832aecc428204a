// The `n` choices of one chat or text completion: each is its own engine request in the batch,
// their events merged in arrival order. Choice 0 starts first; the others once its prefill has run
// (its first event), so their prompt comes from the prefix cache instead of n prefills. A failure
// of any choice fails the request (the others are aborted); a client that goes away aborts all.
import type { ServerResponse } from 'node:http';
import { SAMPLING_LIMITS } from '../engine/sampling-params.js';
import { startGeneration, type GenerationDeps, type GenerationEvent, type GenerationRun } from './generation-stream.js';
import type { GenerationRequest } from './validate.js';

export interface ChoiceEvent {
  index: number;
  event: GenerationEvent;
}

/** One choice failed: its index and the error (an EngineRequestError, an HttpError, ...). */
export class ChoiceFailure extends Error {
  constructor(
    readonly index: number,
    override readonly cause: unknown,
  ) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

export interface Choices {
  readonly n: number;
  /** Every choice's events tagged with its index; throws ChoiceFailure (the others are aborted). Ends
   *  early, without every done event, when the request was aborted. */
  readonly events: AsyncIterable<ChoiceEvent>;
  /** Aborts every choice, started or not. */
  abort(): void;
}

/**
 * The seed of choice i: the request's seed for choice 0 (n=1 is unchanged), the next ones after it,
 * wrapping within SAMPLING_LIMITS.maxSeed. Draws are a hash of (seed, counter), so neighbouring
 * seeds give independent streams: the choices differ, and a seeded request repeats them all.
 */
export function choiceSeed(seed: number, index: number): number {
  const span = SAMPLING_LIMITS.maxSeed - seed; // exact: both below 2^53
  return index <= span ? seed + index : index - span - 1;
}

/**
 * Starts choice 0 and arranges the rest. Throws before anything is queued when choice 0 cannot
 * start (the caller answers with a status); a later choice that cannot start fails the request.
 */
export async function startChoices(deps: GenerationDeps, g: GenerationRequest, id: string, res: ServerResponse): Promise<Choices> {
  const n = g.n ?? 1;
  const runs: GenerationRun[] = [];
  let aborted = false;
  let settled = false; // every choice ended (done or failed): a later close is no disconnect
  const abort = () => {
    aborted = true;
    for (const r of runs) r.abort();
  };
  const start = async (index: number): Promise<GenerationRun> => {
    const params = index === 0 ? g.params : { ...g.params, seed: choiceSeed(g.params.seed, index) };
    const run = await startGeneration(deps, { ...g, params }, index === 0 ? id : `${id}-${index}`);
    runs.push(run);
    if (aborted) run.abort(); // the client left while it was starting
    return run;
  };
  const first = await start(0);
  const gone = () => {
    if (settled || aborted) return;
    deps.metrics.disconnects++;
    abort(); // the client went away: free every choice's KV now
  };
  res.on('close', gone);
  if (res.destroyed) gone(); // it left while choice 0 was starting

  // Without a prefix cache there is nothing to share: every choice starts at once.
  const share = n > 1 && deps.engine.stats().prefixCache.enabled;

  let open = () => {};
  const prefilled = share ? new Promise<void>((resolve) => (open = resolve)) : Promise.resolve();
  async function* lead(): AsyncGenerator<GenerationEvent> {
    try {
      for await (const ev of first.events) {
        open();
        yield ev;
      }
    } finally {
      open(); // ended or failed without an event: the others start (or see the abort) all the same
    }
  }
  async function* later(index: number): AsyncGenerator<GenerationEvent> {
    await prefilled;
    if (aborted) return;
    yield* (await start(index)).events;
  }
  const sources = [lead(), ...Array.from({ length: n - 1 }, (_, i) => later(i + 1))];
  async function* merged(): AsyncGenerator<ChoiceEvent> {
    try {
      yield* merge(sources);
    } catch (err) {
      abort();
      throw err;
    } finally {
      settled = true;
    }
  }
  return { n, events: merged(), abort };
}

/** The events of every source as they come, tagged with the source's index; the first failure ends it. */
async function* merge(sources: AsyncGenerator<GenerationEvent>[]): AsyncGenerator<ChoiceEvent> {
  type Next = { index: number; r: IteratorResult<GenerationEvent> };
  const pending = new Map<number, Promise<Next>>();
  const pull = (index: number) =>
    pending.set(
      index,
      sources[index]!.next().then(
        (r) => ({ index, r }),
        (err: unknown) => Promise.reject(new ChoiceFailure(index, err)),
      ),
    );
  sources.forEach((_, i) => pull(i));
  try {
    while (pending.size > 0) {
      const { index, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(index);
        continue;
      }
      pull(index);
      yield { index, event: r.value };
    }
  } finally {
    // Rejections of the sources still pending are the abort's consequences: already handled.
    for (const p of pending.values()) p.catch(() => undefined);
  }
}
