// Prometheus text exposition of the engine's state and the server's counters and latencies.
import type { EngineStats } from '../engine/engine.js';
import type { EngineDone } from '../engine/request.js';

const LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Gaps between streamed tokens: a decode step is milliseconds on a GPU, tens of them on a CPU. */
const INTER_TOKEN_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5];

class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(private readonly buckets: readonly number[] = LATENCY_BUCKETS) {
    this.counts = new Array<number>(buckets.length).fill(0);
  }

  observe(v: number): void {
    this.sum += v;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (v <= this.buckets[i]!) this.counts[i]!++;
  }

  /** `labels` is the rendered label set without braces, e.g. model="x". */
  render(name: string, help: string, labels: string): string[] {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
    this.buckets.forEach((b, i) => lines.push(`${name}_bucket{${labels},le="${b}"} ${this.counts[i]}`));
    lines.push(`${name}_bucket{${labels},le="+Inf"} ${this.count}`, `${name}_sum{${labels}} ${this.sum}`, `${name}_count{${labels}} ${this.count}`);
    return lines;
  }
}

/** The latency histograms of one model (its `model` label). */
class ModelLatency {
  readonly ttft = new Histogram();
  readonly e2e = new Histogram();
  readonly interToken = new Histogram(INTER_TOKEN_BUCKETS);
  readonly queue = new Histogram();
  readonly prefill = new Histogram();
}

/** What a generation route records: its model's latencies, and the server-wide disconnect and failure counts. */
export interface GenerationMetrics {
  observeTtft(seconds: number): void;
  /** The gap between two consecutive streamed tokens of one request. */
  observeInterToken(seconds: number): void;
  observeDone(done: EngineDone, seconds: number): void;
  disconnects: number;
  failures: number;
}

const labelOf = (modelId: string) => `model="${modelId.replace(/["\\\n]/g, '_')}"`;

export class ServerMetrics {
  /** HTTP responses by "route status". */
  private readonly http = new Map<string, number>();
  /** Latencies by model id; kept after a model unloads (Prometheus counters do not go back). */
  private readonly latency = new Map<string, ModelLatency>();
  disconnects = 0;
  failures = 0;

  countHttp(route: string, status: number): void {
    const key = `${route} ${status}`;
    this.http.set(key, (this.http.get(key) ?? 0) + 1);
  }

  /** The recorder for one model's requests. */
  forModel(modelId: string): GenerationMetrics {
    let h = this.latency.get(modelId);
    if (!h) this.latency.set(modelId, (h = new ModelLatency()));
    const lat = h;
    const server = this;
    return {
      observeTtft: (seconds) => lat.ttft.observe(seconds),
      observeInterToken: (seconds) => lat.interToken.observe(seconds),
      observeDone: (done, seconds) => {
        lat.e2e.observe(seconds);
        const { queueMs, ttftMs } = done.timings;
        lat.queue.observe(queueMs / 1000);
        // From its first scheduled step to its first token; a request that produced none had no measured prefill.
        if (ttftMs > 0) lat.prefill.observe(Math.max(0, ttftMs - queueMs) / 1000);
      },
      get disconnects() {
        return server.disconnects;
      },
      set disconnects(v: number) {
        server.disconnects = v;
      },
      get failures() {
        return server.failures;
      },
      set failures(v: number) {
        server.failures = v;
      },
    };
  }

  /** One histogram family: a series per model that has observations. */
  private histograms(name: string, help: string, pick: (h: ModelLatency) => Histogram): string[] {
    const rows = [...this.latency].flatMap(([id, h]) => pick(h).render(name, help, labelOf(id)).slice(2));
    return rows.length > 0 ? [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`, ...rows] : [];
  }

  /** Each engine metric once, with one series per loaded model (its `model` label); then the server's. */
  render(engines: readonly { stats: EngineStats; modelId: string; /** what the KV pool stores (absent for stand-in models) */ kvCacheDtype?: string }[]): string {
    // A loaded model shows its (empty) histograms before its first request.
    for (const e of engines) if (!this.latency.has(e.modelId)) this.latency.set(e.modelId, new ModelLatency());
    const series = engines.map((e) => ({ s: e.stats, m: labelOf(e.modelId), dtype: e.kvCacheDtype }));
    const metric = (type: 'gauge' | 'counter', name: string, help: string, v: (s: EngineStats) => number | undefined) => {
      const rows = series.flatMap(({ s, m }) => {
        const x = v(s);
        return x === undefined ? [] : [`${name}{${m}} ${x}`];
      });
      return rows.length > 0 ? [`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...rows] : [];
    };
    const gauge = (name: string, help: string, v: (s: EngineStats) => number | undefined) => metric('gauge', name, help, v);
    const counter = (name: string, help: string, v: (s: EngineStats) => number | undefined) => metric('counter', name, help, v);
    // Disconnects are counted by the server, not per model: one model keeps its label, several share none.
    const disconnects = series.length === 1 ? `{${series[0]!.m}}` : '';
    const lines: string[] = [
      ...gauge('rapid_healthy', '1 when the engine is healthy', (s) => (s.healthy ? 1 : 0)),
      ...gauge('rapid_requests_running', 'requests in the running batch', (s) => s.running),
      ...gauge('rapid_requests_waiting', 'requests in the waiting queue', (s) => s.waiting),
      ...gauge('rapid_kv_cache_usage_ratio', 'share of KV blocks referenced by requests', (s) => s.kv.usage),
      ...gauge('rapid_kv_cache_blocks_used', 'KV blocks referenced by requests', (s) => s.kv.usedBlocks),
      ...gauge('rapid_kv_cache_blocks_total', 'KV blocks in the pool', (s) => s.kv.numBlocks),
      ...gauge('rapid_kv_cache_tokens_total', 'tokens the KV pool holds', (s) => s.kv.numBlocks * s.kv.blockSize),
      ...(series.some((x) => x.dtype) ? ['# HELP rapid_kv_cache_info the KV cache element type', '# TYPE rapid_kv_cache_info gauge'] : []),
      ...series.flatMap(({ m, dtype }) => (dtype ? [`rapid_kv_cache_info{${m},dtype="${dtype}"} 1`] : [])),
      ...gauge('rapid_generation_tokens_per_second', 'generated tokens per second over the last 10 s', (s) => s.generatedTokensPerSecond),
      ...counter('rapid_prompt_tokens_total', 'prompt tokens submitted', (s) => s.tokens.prompt),
      ...counter('rapid_generation_tokens_total', 'tokens generated', (s) => s.tokens.generated),
      ...counter('rapid_prefix_cache_queries_total', 'prompt tokens looked up in the prefix cache', (s) => s.prefixCache.queryTokens),
      ...counter('rapid_prefix_cache_hits_total', 'prompt tokens served from the prefix cache', (s) => s.prefixCache.hitTokens),
      ...counter('rapid_image_encodes_total', 'images run through the vision encoder', (s) => s.encoderCache?.encodes),
      ...counter('rapid_image_encode_seconds_total', 'time spent in the vision encoder', (s) => (s.encoderCache ? s.encoderCache.encodeMs / 1000 : undefined)),
      ...counter('rapid_encoder_cache_hits_total', 'images whose embeddings came from the encoder cache', (s) => s.encoderCache?.hits),
      ...gauge('rapid_encoder_cache_bytes', 'bytes of image embeddings in the encoder cache', (s) => s.encoderCache?.bytes),
      ...counter('rapid_steps_total', 'engine steps run', (s) => s.steps),
      ...counter('rapid_steps_ahead_total', 'engine steps the GPU had started before they were asked for', (s) => s.stepsAhead),
      ...counter('rapid_step_failures_total', 'engine steps that failed', (s) => s.stepFailures),
      ...counter('rapid_watchdog_trips_total', 'steps that did not return in time', (s) => s.watchdogTrips),
      ...counter('rapid_preemptions_total', 'requests preempted for KV space', (s) => s.preemptions),
      ...counter('rapid_spec_decode_draft_tokens_total', 'speculative draft tokens verified', (s) => s.speculative?.drafted),
      ...counter('rapid_spec_decode_accepted_tokens_total', 'speculative draft tokens kept by verification', (s) => s.speculative?.accepted),
      ...counter('rapid_spec_decode_rows_total', 'decode rows verified with a draft', (s) => s.speculative?.rows),
      '# HELP rapid_client_disconnects_total requests aborted by their client',
      '# TYPE rapid_client_disconnects_total counter',
      `rapid_client_disconnects_total${disconnects} ${this.disconnects}`,
      ...(series.length > 0 ? ['# HELP rapid_requests_finished_total requests ended, by reason', '# TYPE rapid_requests_finished_total counter'] : []),
      ...series.flatMap(({ s, m }) => (['stop', 'length', 'abort', 'error'] as const).map((r) => `rapid_requests_finished_total{${m},reason="${r}"} ${s.requests[r]}`)),
      '# HELP rapid_http_responses_total HTTP responses by route and status',
      '# TYPE rapid_http_responses_total counter',
      ...[...this.http].map(([key, v]) => {
        const [route, status] = key.split(' ');
        return `rapid_http_responses_total{route="${route}",status="${status}"} ${v}`;
      }),
      ...this.histograms('rapid_time_to_first_token_seconds', 'time from request to first token', (h) => h.ttft),
      ...this.histograms('rapid_request_duration_seconds', 'time from request to its last token', (h) => h.e2e),
      ...this.histograms('rapid_inter_token_latency_seconds', 'time between two consecutive tokens of a request', (h) => h.interToken),
      ...this.histograms('rapid_request_queue_seconds', 'time a request waited before its first scheduled step', (h) => h.queue),
      ...this.histograms('rapid_request_prefill_seconds', 'time from a request\'s first scheduled step to its first token', (h) => h.prefill),
    ];
    return `${lines.join('\n')}\n`;
  }
}
