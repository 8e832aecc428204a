// One concurrency level, one run: `concurrency` workers take the level's requests in order, each
// request streamed with its own timeout; a level deadline cuts in-flight requests and leaves the
// rest unsent (recorded as failures), so a level always ends.
import { setMaxListeners } from 'node:events';
import { checkReply } from './check-reply.js';
import type { RequestOutcome } from './outcome.js';
import type { SchemaCheck } from './schema-validator.js';
import { streamRequest, type StreamTarget } from './stream-request.js';
import type { BenchRequest } from './workload.js';

export interface LevelProgress {
  total: number;
  done: number;
  ok: number;
  failed: number;
  inFlight: number;
  tokens: number;
  elapsedMs: number;
}

export interface LevelRunOptions {
  target: StreamTarget;
  requests: BenchRequest[];
  concurrency: number;
  timeoutMs: number;
  /** The whole level ends by then (ms after it starts). */
  deadlineMs: number;
  temperature: number;
  schema?: SchemaCheck;
  onProgress?: (p: LevelProgress) => void;
}

export interface LevelRunOutcome {
  outcomes: RequestOutcome[];
  wallMs: number;
  deadlineHit: boolean;
}

export async function runLevel(o: LevelRunOptions): Promise<LevelRunOutcome> {
  const start = performance.now();
  const deadline = new AbortController();
  setMaxListeners(o.concurrency + 16, deadline.signal); // one listener per in-flight request
  let deadlineHit = false;
  const timer = setTimeout(() => {
    deadlineHit = true;
    deadline.abort();
  }, o.deadlineMs);
  const outcomes: RequestOutcome[] = new Array(o.requests.length);
  const p: LevelProgress = { total: o.requests.length, done: 0, ok: 0, failed: 0, inFlight: 0, tokens: 0, elapsedMs: 0 };
  const report = () => o.onProgress?.({ ...p, elapsedMs: performance.now() - start });
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= o.requests.length) return;
      const req = o.requests[i]!;
      if (deadline.signal.aborted) {
        outcomes[i] = { index: req.index, kind: req.kind, ok: false, failure: 'not_started', error: 'the level deadline passed first', startMs: performance.now() - start, itlMs: [], e2eMs: 0, outputTokens: 0, tokensFromUsage: false, content: '' };
        p.done++;
        p.failed++;
        continue;
      }
      p.inFlight++;
      report();
      const raw = await streamRequest(
        o.target,
        req,
        { timeoutMs: o.timeoutMs, temperature: o.temperature, deadline: deadline.signal, levelStart: start, onToken: () => (p.tokens++, report()) },
        o.schema?.schema,
      );
      const out = checkReply(raw, o.schema);
      outcomes[i] = out;
      p.inFlight--;
      p.done++;
      if (out.ok) p.ok++;
      else p.failed++;
      report();
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(o.concurrency, o.requests.length)) }, worker));
  } finally {
    clearTimeout(timer);
  }
  return { outcomes, wallMs: performance.now() - start, deadlineHit };
}
