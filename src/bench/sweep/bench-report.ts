// The whole result of `rapid bench` as written by --json (and read by the HTML report): what was
// benched, with which settings, and every figure of every level and run.
import type { LevelSummary } from './level-metrics.js';
import type { WorkloadKind } from './workload.js';

export interface BenchSettings {
  concurrency: number[];
  requests: number;
  runs: number;
  seed: number;
  timeoutMs: number;
  levelDeadlineMs: number | null;
  maxTokens: number;
  temperature: number;
  /** top_p sent with every request (null: not sent). */
  topP?: number | null;
  warmup: number;
  promptLength: string;
  outputLength: string;
  workload: WorkloadKind[];
  schemaFile: string | null;
  imagesDir: string | null;
  images: number;
}

export interface BenchReport {
  tool: 'rapid bench';
  version: string;
  startedAt: string;
  wallMs: number;
  target: {
    endpoint: string;
    model: string | null;
    /** The model directory when bench served the model itself. */
    inProcessModel: string | null;
  };
  settings: BenchSettings;
  levels: LevelSummary[];
}
