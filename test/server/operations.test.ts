// Operations on the real server and engine (fake runner): access entries per request with the
// client's X-Request-Id, the latency histograms by model, readiness turning 503 before shutdown,
// and both log formats.
import { describe, expect, it } from 'vitest';
import type { AccessEntry } from '../../src/server/access-log.js';
import { accessText, createServeLogger } from '../../src/cli/log-format.js';
import { MODEL_ID, post, raw, startFakeServer } from './helpers.js';

const chat = (extra: Record<string, unknown> = {}) => ({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, ...extra });

/** Entries arrive when the response closes: wait (bounded) until n are in. */
async function entries(log: AccessEntry[], n: number): Promise<AccessEntry[]> {
  for (let i = 0; i < 200 && log.length < n; i++) await new Promise((r) => setTimeout(r, 10));
  return log;
}

describe('operations', () => {
  it('logs one access entry per request with the client request id, tokens, TTFT and finish reason', async () => {
    const log: AccessEntry[] = [];
    const { server, url } = await startFakeServer({}, {}, { accessLog: (e) => log.push(e) });
    try {
      const r = await post(url, '/v1/chat/completions', chat({ stream: true }), { 'x-request-id': 'req-abc-123' });
      expect(r.status).toBe(200);
      expect(r.headers.get('x-request-id')).toBe('req-abc-123');
      const plain = await post(url, '/v1/chat/completions', chat());
      const generated = plain.headers.get('x-request-id');
      expect(generated).toMatch(/^[0-9a-f-]{36}$/);
      const bad = await post(url, '/v1/chat/completions', { model: MODEL_ID, messages: 'nope' }, { 'x-request-id': 'bad one' });
      expect(bad.status).toBe(400);
      expect(bad.headers.get('x-request-id')).not.toBe('bad one'); // spaces could split a log line: replaced
      expect((await raw(url, '/health/ready')).status).toBe(200);
      expect((await raw(url, '/metrics')).status).toBe(200);
      const [streamed, whole, refused] = await entries(log, 3);
      expect(streamed).toMatchObject({ requestId: 'req-abc-123', method: 'POST', route: '/v1/chat/completions', model: MODEL_ID, status: 200, outputTokens: 5, finishReason: 'length', incomplete: false });
      expect(streamed!.promptTokens).toBeGreaterThan(0);
      expect(streamed!.ttftMs).toBeGreaterThanOrEqual(0);
      expect(streamed!.durationMs).toBeGreaterThanOrEqual(streamed!.ttftMs!);
      expect(whole).toMatchObject({ requestId: generated, status: 200, outputTokens: 5 });
      expect(refused).toMatchObject({ status: 400, promptTokens: null, finishReason: null });
      expect(log).toHaveLength(3); // successful probes are not logged
    } finally {
      await server.close(1000);
    }
  });

  it('exposes inter-token, queue and prefill histograms labelled by model', async () => {
    const { server, url } = await startFakeServer();
    try {
      await post(url, '/v1/chat/completions', chat({ stream: true, max_tokens: 6 }));
      const m = (await raw(url, '/metrics')).text;
      const count = (name: string) => Number(new RegExp(`^${name}_count\\{model="${MODEL_ID}"\\} (\\d+)$`, 'm').exec(m)?.[1]);
      expect(count('rapid_inter_token_latency_seconds')).toBe(5); // 6 tokens, 5 gaps
      expect(count('rapid_request_queue_seconds')).toBe(1);
      expect(count('rapid_request_prefill_seconds')).toBe(1);
      expect(count('rapid_time_to_first_token_seconds')).toBe(1);
      expect(m).toMatch(/^rapid_inter_token_latency_seconds_bucket\{model="fake-model",le="\+Inf"\} 5$/m);
      expect(m).toMatch(/^# TYPE rapid_request_prefill_seconds histogram$/m);
    } finally {
      await server.close(1000);
    }
  });

  it('turns /health/ready to 503 first while requests are still served', async () => {
    const { server, url } = await startFakeServer();
    try {
      expect((await raw(url, '/health/ready')).status).toBe(200);
      server.markUnready();
      const ready = await raw(url, '/health/ready');
      expect(ready.status).toBe(503);
      expect(ready.json()).toEqual({ status: 'not_ready', reason: 'shutting down' });
      expect((await raw(url, '/health')).status).toBe(200); // alive: liveness must not restart it
      expect((await post(url, '/v1/chat/completions', chat())).status).toBe(200);
    } finally {
      await server.close(1000);
    }
  });

  it('writes text and JSON log lines', () => {
    const e: AccessEntry = {
      requestId: 'r1', method: 'POST', route: '/v1/completions', model: 'm', status: 200,
      promptTokens: 7, outputTokens: 3, cachedTokens: 0, ttftMs: 12.5, durationMs: 40, finishReason: 'stop', incomplete: false,
    };
    expect(accessText(e)).toBe('POST /v1/completions 200 0.040s id=r1 model=m prompt=7 output=3 cached=0 ttft=0.013s finish=stop');
    const out: string[] = [];
    const json = createServeLogger('json', (t) => out.push(t));
    json.access(e);
    json.log('serving m');
    json.access({ ...e, status: 503, promptTokens: null, outputTokens: null, cachedTokens: null, ttftMs: null, finishReason: null });
    expect(out.every((l) => l.endsWith('\n') && l.indexOf('\n') === l.length - 1)).toBe(true);
    const [a, b, c] = out.map((l) => JSON.parse(l));
    expect(a).toMatchObject({ level: 'info', msg: 'request', request_id: 'r1', route: '/v1/completions', model: 'm', status: 200, prompt_tokens: 7, output_tokens: 3, ttft_ms: 12.5, duration_ms: 40, finish_reason: 'stop' });
    expect(Date.parse(a.time)).not.toBeNaN();
    expect(b).toMatchObject({ level: 'info', msg: 'serving m' });
    expect(c).toMatchObject({ level: 'error', status: 503, prompt_tokens: null });
    const text: string[] = [];
    createServeLogger('text', (t) => text.push(t)).access(e);
    expect(text[0]).toBe(`[rapid] ${accessText(e)}\n`);
  });
});
