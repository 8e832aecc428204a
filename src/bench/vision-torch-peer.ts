// The transformers peer of the 3B-shaped tower bench (f32 on the CPU, bf16 sdpa on CUDA):
// bench/peers/torch_vision_tower.py kept alive in a child process, asked for one timed forward per round so rounds
// interleave with rapid's.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface, type Interface } from 'node:readline';
import { join } from 'node:path';

import { packageRoot } from '../native/binding.js';

/** Bound on the peer's start (import + model build + warm-up) and on one forward, on a loaded 2-core machine. */
const PEER_START_MS = 10 * 60_000;
const PEER_ROUND_MS = 10 * 60_000;

/** Where the peer runs: f32 on the CPU, or bf16 (sdpa) on the GPU next to rapid's CUDA tower. */
export type TorchDevice = 'cpu' | 'cuda';

/** The peer's arithmetic, for reports. */
export function torchPeerLabel(device: TorchDevice): string {
  return device === 'cuda' ? 'transformers bf16 (sdpa, CUDA)' : 'transformers f32 (sdpa)';
}

export class TorchTowerPeer {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly lines: Interface;
  private readonly pending: ((line: string | null) => void)[] = [];
  private stderr = '';

  private constructor(python: string, configPath: string, threads: number, grid: [number, number, number], device: TorchDevice) {
    const script = join(packageRoot(), 'bench', 'peers', 'torch_vision_tower.py');
    const where = device === 'cuda' ? ['--device', 'cuda', '--dtype', 'bf16'] : [];
    this.child = spawn(python, [script, '--config', configPath, '--threads', String(threads), '--grid', ...grid.map(String), ...where], { stdio: 'pipe' });
    this.child.stderr.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-4000);
    });
    this.lines = createInterface({ input: this.child.stdout });
    this.lines.on('line', (l) => this.pending.shift()?.(l));
    this.lines.on('close', () => {
      for (const p of this.pending.splice(0)) p(null);
    });
  }

  /** Starts the peer and waits (bounded) for its warm-up forward. */
  static async start(python: string, configPath: string, threads: number, grid: [number, number, number], device: TorchDevice = 'cpu'): Promise<TorchTowerPeer> {
    const p = new TorchTowerPeer(python, configPath, threads, grid, device);
    await p.next(PEER_START_MS, 'start');
    return p;
  }

  /** One timed forward of the peer's tower: wall and process CPU ms, as the peer measured them. */
  async run(): Promise<{ ms: number; cpuMs: number }> {
    this.child.stdin.write('run\n');
    const msg = JSON.parse(await this.next(PEER_ROUND_MS, 'round')) as { ms?: unknown; cpuMs?: unknown };
    if (typeof msg.ms !== 'number' || typeof msg.cpuMs !== 'number') throw new Error(`torch peer answered ${JSON.stringify(msg)}`);
    return { ms: msg.ms, cpuMs: msg.cpuMs };
  }

  close(): void {
    this.child.stdin.end();
    this.child.kill();
  }

  private next(timeoutMs: number, what: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.close();
        reject(new Error(`torch peer: no answer to ${what} within ${timeoutMs / 1000} s; stderr: ${this.stderr}`));
      }, timeoutMs);
      this.pending.push((line) => {
        clearTimeout(timer);
        if (line === null) reject(new Error(`torch peer exited during ${what}; stderr: ${this.stderr}`));
        else resolve(line);
      });
    });
  }
}
