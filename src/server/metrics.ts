// Prometheus text exposition of the engine's state and the server's counters and latencies.
import type { EngineStats } from '../engine/engine.js';
import type { EngineDone } from '../engine/request.js';

const LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

class Histogram {
  readonly counts = new Array<number>(LATENCY_BUCKETS.length).fill(0);
  sum = 0;
  count = 0;

  observe(v: number): void {
    this.sum += v;
    this.count++;
    for (let i = 0; i < LATENCY_BUCKETS.length; i++) if (v <= LATENCY_BUCKETS[i]!) this.counts[i]!++;
  }

  render(name: string, help: string): string[] {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
    LATENCY_BUCKETS.forEach((b, i) => lines.push(`${name}_bucket{le="${b}"} ${this.counts[i]}`));
    lines.push(`${name}_bucket{le="+Inf"} ${this.count}`, `${name}_sum ${this.sum}`, `${name}_count ${this.count}`);
    return lines;
  }
}

export class ServerMetrics {
  /** HTTP responses by "route status". */
  private readonly http = new Map<string, number>();
  private readonly ttft = new Histogram();
  private readonly e2e = new Histogram();
  disconnects = 0;
  failures = 0;

  countHttp(route: string, status: number): void {
    const key = `${route} ${status}`;
    this.http.set(key, (this.http.get(key) ?? 0) + 1);
  }

  observeTtft(seconds: number): void {
    this.ttft.observe(seconds);
  }

  observeDone(_done: EngineDone, seconds: number): void {
    this.e2e.observe(seconds);
  }

  render(s: EngineStats, modelId: string): string {
    const m = `model="${modelId.replace(/["\\\n]/g, '_')}"`;
    const gauge = (name: string, help: string, v: number) => [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name}{${m}} ${v}`];
    const counter = (name: string, help: string, v: number) => [`# HELP ${name} ${help}`, `# TYPE ${name} counter`, `${name}{${m}} ${v}`];
    const lines: string[] = [
      ...gauge('rapid_healthy', '1 when the engine is healthy', s.healthy ? 1 : 0),
      ...gauge('rapid_requests_running', 'requests in the running batch', s.running),
      ...gauge('rapid_requests_waiting', 'requests in the waiting queue', s.waiting),
      ...gauge('rapid_kv_cache_usage_ratio', 'share of KV blocks referenced by requests', s.kv.usage),
      ...gauge('rapid_kv_cache_blocks_used', 'KV blocks referenced by requests', s.kv.usedBlocks),
      ...gauge('rapid_kv_cache_blocks_total', 'KV blocks in the pool', s.kv.numBlocks),
      ...gauge('rapid_generation_tokens_per_second', 'generated tokens per second over the last 10 s', s.generatedTokensPerSecond),
      ...counter('rapid_prompt_tokens_total', 'prompt tokens submitted', s.tokens.prompt),
      ...counter('rapid_generation_tokens_total', 'tokens generated', s.tokens.generated),
      ...counter('rapid_prefix_cache_queries_total', 'prompt tokens looked up in the prefix cache', s.prefixCache.queryTokens),
      ...counter('rapid_prefix_cache_hits_total', 'prompt tokens served from the prefix cache', s.prefixCache.hitTokens),
      ...(s.speculative
        ? [
            ...counter('rapid_spec_decode_draft_tokens_total', 'speculative draft tokens verified', s.speculative.drafted),
            ...counter('rapid_spec_decode_accepted_tokens_total', 'speculative draft tokens kept by verification', s.speculative.accepted),
            ...counter('rapid_spec_decode_rows_total', 'decode rows verified with a draft', s.speculative.rows),
          ]
        : []),
      ...(s.encoderCache
        ? [
            ...counter('rapid_image_encodes_total', 'images run through the vision encoder', s.encoderCache.encodes),
            ...counter('rapid_image_encode_seconds_total', 'time spent in the vision encoder', s.encoderCache.encodeMs / 1000),
            ...counter('rapid_encoder_cache_hits_total', 'images whose embeddings came from the encoder cache', s.encoderCache.hits),
            ...gauge('rapid_encoder_cache_bytes', 'bytes of image embeddings in the encoder cache', s.encoderCache.bytes),
          ]
        : []),
      ...counter('rapid_steps_total', 'engine steps run', s.steps),
      ...counter('rapid_steps_ahead_total', 'engine steps the GPU had started before they were asked for', s.stepsAhead),
      ...counter('rapid_step_failures_total', 'engine steps that failed', s.stepFailures),
      ...counter('rapid_watchdog_trips_total', 'steps that did not return in time', s.watchdogTrips),
      ...counter('rapid_preemptions_total', 'requests preempted for KV space', s.preemptions),
      ...counter('rapid_client_disconnects_total', 'requests aborted by their client', this.disconnects),
      '# HELP rapid_requests_finished_total requests ended, by reason',
      '# TYPE rapid_requests_finished_total counter',
      ...(['stop', 'length', 'abort', 'error'] as const).map((r) => `rapid_requests_finished_total{${m},reason="${r}"} ${s.requests[r]}`),
      '# HELP rapid_http_responses_total HTTP responses by route and status',
      '# TYPE rapid_http_responses_total counter',
      ...[...this.http].map(([key, v]) => {
        const [route, status] = key.split(' ');
        return `rapid_http_responses_total{route="${route}",status="${status}"} ${v}`;
      }),
      ...this.ttft.render('rapid_time_to_first_token_seconds', 'time from request to first token'),
      ...this.e2e.render('rapid_request_duration_seconds', 'time from request to its last token'),
    ];
    return `${lines.join('\n')}\n`;
  }
}
