// Applies corruptions to copies of fixtures and loads each in a child process (test/models/load-child.mjs)
// under a time limit, so a signal or a hang is an outcome, not the end of the run.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { copyDir, type Corruption } from './checkpoint-corruptions.js';

/** 'library': openTextModel (validation + native); 'native': the addon alone. */
export type LoadMode = 'library' | 'native';

export type Outcome = 'error' | 'loaded' | 'signal' | 'hang' | 'generator';

export interface Result {
  c: Corruption;
  outcome: Outcome;
  message?: string;
  errorName?: string;
  signal?: string;
}

const CHILD = resolve(import.meta.dirname, 'load-child.mjs');

interface Line {
  start?: number;
  i?: number;
  ok?: boolean;
  name?: string;
  message?: string;
}

/** Runs dirs[from..] in one child; resolves with the per-index lines seen and how the child ended. */
function runChild(listFile: string, perLoadMs: number, mode: LoadMode): Promise<{ lines: Line[]; signal?: string; hung: boolean }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [CHILD, listFile, mode], { stdio: ['ignore', 'pipe', 'pipe'] });
    const lines: Line[] = [];
    let buf = '';
    let hung = false;
    let timer = setTimeout(() => { hung = true; child.kill('SIGKILL'); }, perLoadMs);
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString('utf8');
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          lines.push(JSON.parse(line) as Line);
        } catch {
          continue; // native code printing to stdout: not ours
        }
        clearTimeout(timer);
        timer = setTimeout(() => { hung = true; child.kill('SIGKILL'); }, perLoadMs);
      }
    });
    child.stderr.resume();
    child.on('exit', (_code, signal) => {
      clearTimeout(timer);
      done({ lines, signal: hung ? undefined : (signal ?? undefined), hung });
    });
  });
}

export async function runCorruptions(corruptions: Corruption[], fixtureDir: (fixture: string) => string, mode: LoadMode = 'library', perLoadMs = 20_000): Promise<Result[]> {
  const root = mkdtempSync(join(tmpdir(), 'rapid-corrupt-'));
  try {
    const results: (Result | undefined)[] = new Array(corruptions.length);
    const dirs: string[] = [];
    corruptions.forEach((c, i) => {
      const dir = join(root, String(i));
      dirs.push(dir);
      try {
        copyDir(fixtureDir(c.fixture), dir);
        c.apply(dir);
      } catch (err) {
        results[i] = { c, outcome: 'generator', message: (err as Error).message };
      }
    });
    let from = 0;
    while (from < corruptions.length) {
      const pending = dirs.map((d, i) => ({ d, i })).slice(from).filter(({ i }) => !results[i]);
      if (!pending.length) break;
      const listFile = join(root, `list-${from}.json`);
      writeFileSync(listFile, JSON.stringify(pending.map((p) => p.d)));
      const run = await runChild(listFile, perLoadMs, mode);
      let last = -1;
      for (const l of run.lines) {
        if (l.start !== undefined) {
          last = l.start;
          continue;
        }
        const p = pending[l.i as number];
        if (!p) continue;
        const c = corruptions[p.i] as Corruption;
        results[p.i] = l.ok ? { c, outcome: 'loaded' } : { c, outcome: 'error', message: l.message, errorName: l.name };
      }
      const started = pending[last];
      if (started && !results[started.i]) {
        const c = corruptions[started.i] as Corruption;
        results[started.i] = run.hung ? { c, outcome: 'hang' } : { c, outcome: 'signal', signal: run.signal ?? 'exit without result' };
      }
      const next = pending.findIndex((p) => !results[p.i]);
      from = next < 0 ? corruptions.length : (pending[next] as { i: number }).i;
      if (!started && !run.lines.length) {
        // The child died before its first load (e.g. dist/ missing): fail everything left, loudly.
        for (const p of pending) results[p.i] = { c: corruptions[p.i] as Corruption, outcome: 'signal', signal: `child failed to start (${run.signal ?? 'exit'})` };
        break;
      }
    }
    return results.map((r, i) => r ?? { c: corruptions[i] as Corruption, outcome: 'hang' });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
