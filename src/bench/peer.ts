// Runs a user-supplied llama.cpp `llama-bench` in the same bench run, so figures are reported as
// ratios against a peer measured on the same machine at the same moment. Nothing here builds it.
import { spawnSync } from 'node:child_process';

export interface PeerResult {
  command: string;
  build: string;
  modelType: string;
  modelBytes: number;
  prefillTokS: number;
  prefillStdTokS: number;
  decodeTokS: number;
  decodeStdTokS: number;
}

interface LlamaBenchRecord {
  build_commit?: string;
  model_type?: string;
  model_size?: number;
  n_prompt?: number;
  n_gen?: number;
  avg_ts?: number;
  stddev_ts?: number;
}

export interface PeerOptions {
  llamaBench: string;
  model: string;
  threads: number;
  promptTokens: number;
  genTokens: number;
  runs: number;
}

export function runPeer(o: PeerOptions): PeerResult {
  const args = ['-m', o.model, '-t', String(o.threads), '-p', String(o.promptTokens), '-n', String(o.genTokens)];
  args.push('-r', String(o.runs), '-o', 'json');
  const command = [o.llamaBench, ...args].join(' ');
  const proc = spawnSync(o.llamaBench, args, { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (proc.error) throw new Error(`peer: cannot run ${o.llamaBench}: ${proc.error.message}`);
  if (proc.status !== 0) {
    const tail = proc.stderr.trim().split('\n').slice(-5).join('\n');
    throw new Error(`peer: ${command} exited with ${String(proc.status)}\n${tail}`);
  }
  let records: LlamaBenchRecord[];
  try {
    records = JSON.parse(proc.stdout) as LlamaBenchRecord[];
  } catch {
    throw new Error(`peer: ${command} did not print JSON (is it llama-bench?)`);
  }
  const pp = records.find((r) => r.n_prompt === o.promptTokens && r.n_gen === 0);
  const tg = records.find((r) => r.n_gen === o.genTokens && r.n_prompt === 0);
  if (!pp?.avg_ts || !tg?.avg_ts) throw new Error(`peer: ${command}: no pp${o.promptTokens}/tg${o.genTokens} results`);
  return {
    command,
    build: pp.build_commit ?? 'unknown',
    modelType: pp.model_type ?? 'unknown',
    modelBytes: pp.model_size ?? 0,
    prefillTokS: pp.avg_ts,
    prefillStdTokS: pp.stddev_ts ?? 0,
    decodeTokS: tg.avg_ts,
    decodeStdTokS: tg.stddev_ts ?? 0,
  };
}
