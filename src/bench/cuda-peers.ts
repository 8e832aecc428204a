// The GPU peers of `npm run bench:cuda`, each run as a child process on the same machine in the same
// run: llama.cpp's llama-batched-bench (CUDA, Q4_0 GGUF) and PyTorch eager bf16 (bench/peers/torch_decode.py).
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { median } from './median.js';

/** Aggregate decode tok/s of a peer at one concurrency level (the median of `runs` when it was run several times). */
export interface PeerFigure {
  shape: string;
  level: number;
  tokS: number;
  runs?: number[];
}

export interface LlamaRun {
  command: string;
  build: string; // what `llama-batched-bench --version` says, or "unknown"
  ggufBytes: number;
  figures: PeerFigure[];
}

export interface TorchRun {
  command: string;
  figures: (PeerFigure & { msPerStep: number; weightBytes: number; torch: string; transformers: string; device: string })[];
}

function run(cmd: string, args: string[], what: string): { stdout: string; stderr: string; command: string } {
  const command = [cmd, ...args].join(' ');
  const proc = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (proc.error) throw new Error(`${what}: cannot run ${cmd}: ${proc.error.message}`);
  if (proc.status !== 0) {
    const tail = `${proc.stdout}\n${proc.stderr}`.trim().split('\n').slice(-8).join('\n');
    throw new Error(`${what}: ${command} exited with ${String(proc.status ?? proc.signal)}\n${tail}`);
  }
  return { stdout: proc.stdout, stderr: proc.stderr, command };
}

/** One row of llama-batched-bench's table: |PP|TG|B|N_KV|T_PP s|S_PP t/s|T_TG s|S_TG t/s|T s|S t/s|. */
export interface BatchedBenchRow {
  pp: number;
  tg: number;
  b: number;
  nKv: number;
  tPp: number;
  sPp: number;
  tTg: number;
  sTg: number;
  t: number;
  s: number;
}

/** The data rows of llama-batched-bench's markdown table (header and separator rows are skipped). */
export function parseBatchedBench(text: string): BatchedBenchRow[] {
  const rows: BatchedBenchRow[] = [];
  for (const line of text.split('\n')) {
    const cells = line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());
    if (cells.length !== 10 || !cells.every((c) => /^-?\d+(\.\d+)?$/.test(c))) continue;
    const [pp, tg, b, nKv, tPp, sPp, tTg, sTg, t, s] = cells.map(Number) as [number, number, number, number, number, number, number, number, number, number];
    rows.push({ pp, tg, b, nKv, tPp, sPp, tTg, sTg, t, s });
  }
  return rows;
}

export interface LlamaOptions {
  binDir: string;
  gguf: string;
  shape: string;
  prompt: number;
  gen: number;
  levels: number[];
  /** Runs of llama-batched-bench (default 1); each level's figure is the median of its S_TG over the runs. */
  repeat?: number;
}

/** Runs llama-batched-bench over every level (`repeat` times); S_TG (decode tok/s over all sequences) is the figure. */
export function runLlamaPeer(o: LlamaOptions): LlamaRun {
  // Every level's sequences must fit: batched-bench skips (silently) a level whose B*(PP+TG) exceeds -c.
  const ctx = Math.ceil((Math.max(...o.levels) * (o.prompt + o.gen)) / 256) * 256;
  const args = ['-m', o.gguf, '-c', String(ctx), '-b', '2048', '-ub', '512', '-npp', String(o.prompt), '-ntg', String(o.gen)];
  args.push('-npl', o.levels.join(','), '-ngl', '99');
  const repeat = o.repeat ?? 1;
  if (!Number.isInteger(repeat) || repeat < 1) throw new Error(`llama.cpp peer: repeat must be a positive integer, got ${repeat}`);
  const runs: number[][] = o.levels.map(() => []);
  let command = '';
  for (let i = 0; i < repeat; i++) {
    const r = run(join(o.binDir, 'llama-batched-bench'), args, 'llama.cpp peer');
    command = r.command;
    const rows = parseBatchedBench(`${r.stdout}\n${r.stderr}`);
    o.levels.forEach((level, li) => {
      const row = rows.find((x) => x.b === level && x.pp === o.prompt && x.tg === o.gen);
      if (!row) throw new Error(`llama.cpp peer: ${r.command}: no table row for B=${level} PP=${o.prompt} TG=${o.gen}`);
      runs[li]!.push(row.sTg);
    });
  }
  const figures = o.levels.map((level, li) =>
    repeat > 1 ? { shape: o.shape, level, tokS: median(runs[li]!), runs: runs[li]! } : { shape: o.shape, level, tokS: runs[li]![0]! },
  );
  const v = run(join(o.binDir, 'llama-batched-bench'), ['--version'], 'llama.cpp peer');
  const build = /^version: (.*)$/m.exec(`${v.stdout}\n${v.stderr}`)?.[1]?.trim() ?? 'unknown';
  return { command, build, ggufBytes: statSync(o.gguf).size, figures };
}

export interface TorchOptions {
  python: string;
  script: string;
  shapes: string[];
  prompt: number;
  gen: number;
  levels: number[];
}

/** Runs the PyTorch eager bf16 peer; it prints one JSON object per (shape, level) line. */
export function runTorchPeer(o: TorchOptions): TorchRun {
  const args = [o.script, '--shapes', o.shapes.join(','), '--levels', o.levels.join(','), '--prompt', String(o.prompt), '--gen', String(o.gen)];
  const r = run(o.python, args, 'torch peer');
  const figures: TorchRun['figures'] = [];
  for (const line of r.stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    const f = JSON.parse(line) as TorchRun['figures'][number];
    if (typeof f.shape !== 'string' || typeof f.level !== 'number' || typeof f.tokS !== 'number') throw new Error(`torch peer: unexpected line ${line}`);
    figures.push(f);
  }
  for (const shape of o.shapes)
    for (const level of o.levels)
      if (!figures.some((f) => f.shape === shape && f.level === level)) throw new Error(`torch peer: ${r.command}: no figure for ${shape} at level ${level}`);
  return { command: r.command, figures };
}
