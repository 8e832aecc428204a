// The engine child of `rapid serve --engine-process child`: opens one model, runs its Engine and its
// grammar service, and talks to the HTTP process over the IPC channel (protocol.ts). A native fault
// here kills this process only; the parent fails its in-flight requests and starts another.
import { EngineUnavailableError } from '../errors/request-errors.js';
import type { Engine, RequestHandle } from '../engine/engine.js';
import { grammarServiceFor, type GrammarService } from '../engine/grammar/grammar-service.js';
import type { RequestGrammar } from '../engine/grammar/request-grammar.js';
import type { EngineDone } from '../engine/request.js';
import { createTextEngine } from '../engine/text-engine.js';
import { openTextModel, type TextModel } from '../engine/text-model.js';
import { INCARNATION_ENV, TEST_ABORT_AFTER_STEPS, TEST_ABORT_MIN_LIVE, TEST_ABORT_ON_START } from './test-faults.js';
import { toWire, type ChildInit, type ChildMessage, type ChildSnapshot, type ParentMessage, type WireDelta, type WireError } from './protocol.js';

/** How often the child pushes its health and stats (the parent serves the last one). */
const SNAPSHOT_MS = 250;

const send = (m: ChildMessage, then?: () => void): void => {
  if (process.connected) process.send!(m, undefined, undefined, then);
  else then?.();
};

let model: TextModel;
let engine: Engine;
let grammar: GrammarService;
const matchers = new Map<number, RequestGrammar>();
let nextHandle = 0;
const live = new Map<string, RequestHandle>();

// The current step's output, sent as one message once the step's events have all been taken.
let deltas: WireDelta[] = [];
let done: EngineDone[] = [];
let doneIds: string[] = [];
let failed: [string, WireError][] = [];
let flushQueued = false;
let stepsSent = 0;
const incarnation = Number(process.env[INCARNATION_ENV] ?? 0);
const abortAfter = incarnation === 0 ? Number(process.env[TEST_ABORT_AFTER_STEPS] ?? 0) : 0;
const abortMinLive = Number(process.env[TEST_ABORT_MIN_LIVE] ?? 1);

function flushSoon(): void {
  if (flushQueued) return;
  flushQueued = true;
  setImmediate(flush);
}

function flush(): void {
  flushQueued = false;
  if (deltas.length === 0 && done.length === 0 && failed.length === 0) return;
  const counts = abortAfter > 0 && live.size >= abortMinLive;
  send({ t: 'step', deltas, done, doneIds, failed });
  deltas = [];
  done = [];
  doneIds = [];
  failed = [];
  // Gone idle: the counters are final for now, so the parent's view of them should be too.
  if (live.size === 0) send({ t: 'snapshot', snapshot: snapshot() });
  // Test-only: a real abort() while the next step is in the addon (RAPID_TEST_ABORT_AFTER_STEPS).
  if (counts && ++stepsSent === abortAfter) setImmediate(() => process.abort());
}

function snapshot(): ChildSnapshot {
  return { health: engine.health(), ready: engine.ready(), stats: engine.stats(), grammar: grammar.health() };
}

async function consume(id: string, handle: RequestHandle): Promise<void> {
  try {
    for await (const ev of handle.events) {
      if (ev.type === 'delta') {
        const d: WireDelta = [id, ev.text, ev.token];
        if (ev.logprob !== undefined) d.push(ev.logprob, ev.topLogprobs);
        deltas.push(d);
      } else {
        done.push(ev);
        doneIds.push(id);
      }
      flushSoon();
    }
  } catch (err) {
    failed.push([id, toWire(err)]);
    flushSoon();
  } finally {
    if (live.get(id) === handle) live.delete(id);
  }
}

async function onMessage(m: ParentMessage): Promise<void> {
  switch (m.t) {
    case 'submit': {
      try {
        let g: RequestGrammar | undefined;
        if (m.grammar !== undefined) {
          g = matchers.get(m.grammar);
          matchers.delete(m.grammar);
          if (g === undefined) throw new EngineUnavailableError('the request\'s grammar was compiled by an engine process that is gone; retry', 'unhealthy');
        }
        const handle = engine.submit({ ...m.options, id: m.id, grammar: g });
        live.set(m.id, handle);
        send({ t: 'accepted', id: m.id });
        void consume(m.id, handle);
      } catch (err) {
        send({ t: 'rejected', id: m.id, error: toWire(err) });
      }
      return;
    }
    case 'abort':
      live.get(m.id)?.abort();
      return;
    case 'grammar':
      try {
        const g = await grammar.matcher(m.format, m.options);
        const handle = ++nextHandle;
        matchers.set(handle, g);
        send({ t: 'grammar', rid: m.rid, handle });
      } catch (err) {
        send({ t: 'grammar', rid: m.rid, error: toWire(err) });
      }
      return;
    case 'grammar-drop':
      matchers.get(m.handle)?.dispose();
      matchers.delete(m.handle);
      return;
    case 'shutdown':
      await engine.shutdown(m.graceMs);
      flush();
      await grammar.close();
      model.close();
      send({ t: 'snapshot', snapshot: snapshot() }, () => process.exit(0));
      return;
    case 'init':
      return;
  }
}

function start(init: ChildInit): void {
  if (incarnation >= 1 && incarnation <= Number(process.env[TEST_ABORT_ON_START] ?? 0)) process.abort(); // test-only: a crash loop
  const t0 = performance.now();
  try {
    model = openTextModel(init.dir, init.load);
    engine = createTextEngine(model, { ...init.engine, log: (line) => send({ t: 'log', line }) });
    grammar = grammarServiceFor(model.text, model.info.vocabSize);
  } catch (err) {
    send({ t: 'fatal', message: (err as Error).message }, () => process.exit(1));
    return;
  }
  process.on('message', (m: ParentMessage) => void onMessage(m));
  setInterval(() => send({ t: 'snapshot', snapshot: snapshot() }), SNAPSHOT_MS);
  send({ t: 'ready', info: model.info, snapshot: snapshot(), loadMs: Math.round(performance.now() - t0) });
}

// The parent went away: nobody is left to serve.
process.on('disconnect', () => process.exit(0));
// Ctrl-C reaches the whole process group: the parent drains this child (shutdown message) instead.
process.on('SIGINT', () => undefined);
process.on('SIGTERM', () => undefined);
process.once('message', (m: ParentMessage) => {
  if (m.t === 'init') start(m.init);
});
