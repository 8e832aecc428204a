// The live terminal view (ink): finished level runs above, the running one below with a progress
// bar, in-flight requests, tokens and the live token rate. Redrawn at most every 100 ms.
import { createElement as h, useSyncExternalStore, type ReactElement } from 'react';
import { Box, Text, render } from 'ink';
import type { LevelRunResult } from './level-metrics.js';
import { levelLine } from './plain-progress.js';
import type { LevelProgress } from './run-level.js';
import type { SweepListener } from './sweep.js';

interface ViewState {
  done: string[];
  current: { concurrency: number; run: number; p: LevelProgress } | null;
}

/** A tiny external store: the sweep writes, the component reads through useSyncExternalStore. */
class ProgressStore {
  private state: ViewState = { done: [], current: null };
  private listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | null = null;
  private pending: ViewState | null = null;

  subscribe = (fn: () => void) => {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  };
  get = () => this.state;

  set(next: ViewState, now = false): void {
    this.pending = next;
    if (now) return this.flush();
    this.timer ??= setTimeout(() => this.flush(), 100);
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!this.pending) return;
    this.state = this.pending;
    this.pending = null;
    for (const fn of this.listeners) fn();
  }

  latest(): ViewState {
    return this.pending ?? this.state;
  }
}

function bar(done: number, total: number, width = 24): string {
  const n = total > 0 ? Math.round((done / total) * width) : 0;
  return `${'█'.repeat(n)}${'░'.repeat(width - n)}`;
}

function ProgressView({ store, title, runs }: { store: ProgressStore; title: string; runs: number }): ReactElement {
  const s = useSyncExternalStore(store.subscribe, store.get);
  const c = s.current;
  const rate = c && c.p.elapsedMs > 0 ? (c.p.tokens / c.p.elapsedMs) * 1000 : 0;
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { bold: true }, title),
    ...s.done.map((line, i) => h(Text, { key: `d${i}`, color: line.includes('[') ? 'yellow' : 'green' }, `✓ ${line}`)),
    c
      ? h(
          Box,
          { flexDirection: 'column', key: 'current' },
          h(Text, { color: 'cyan' }, `▶ concurrency ${c.concurrency}, run ${c.run}/${runs}`),
          h(
            Text,
            null,
            `  ${bar(c.p.done, c.p.total)} ${c.p.done}/${c.p.total}  ok ${c.p.ok}  failed ${c.p.failed}  in flight ${c.p.inFlight}  ` +
              `${c.p.tokens} tokens  ${rate.toFixed(1)} tok/s  ${(c.p.elapsedMs / 1000).toFixed(1)} s`,
          ),
        )
      : null,
  );
}

export function inkProgress(title: string, runs: number, stdout: NodeJS.WriteStream = process.stdout): SweepListener & { close(): void } {
  const store = new ProgressStore();
  const app = render(h(ProgressView, { store, title, runs }), { stdout, patchConsole: false, exitOnCtrlC: true });
  const empty: LevelProgress = { total: 0, done: 0, ok: 0, failed: 0, inFlight: 0, tokens: 0, elapsedMs: 0 };
  return {
    levelStart: (concurrency, run, total) => store.set({ ...store.latest(), current: { concurrency, run, p: { ...empty, total } } }, true),
    progress: (concurrency, run, p) => store.set({ ...store.latest(), current: { concurrency, run, p } }),
    levelDone: (r: LevelRunResult) => store.set({ done: [...store.latest().done, levelLine(r, runs)], current: null }, true),
    close: () => {
      store.flush();
      app.unmount();
    },
  };
}
