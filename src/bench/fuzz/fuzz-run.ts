// Runs a seeded batch of hostile requests against a server at a given concurrency, tallies the
// outcomes, then checks the server is still whole: /health, a json_schema request and a forced
// tool call. The fuzz test (CI) and `node bench/run.js fuzz` (long runs) share it.
import { hostileRequest, type GeneratorOptions, type HostileRequest } from './hostile-requests.js';
import { sendRaw, type Outcome } from './send-raw.js';

export interface FuzzOptions extends GeneratorOptions {
  url: string;
  seed: number;
  requests: number;
  concurrency: number;
  /** A request not answered (or its socket not closed) within this is "unanswered". */
  boundMs: number;
  /** Only these indices (a failure's replay); otherwise 0..requests-1. */
  only?: number[];
}

export interface Failure {
  index: number;
  kind: string;
  why: string;
  outcome: Outcome;
  /** The first bytes of the request as sent. */
  request: string;
}

export interface FuzzReport {
  seed: number;
  /** The generator's sizes: a replay needs the same ones to rebuild the same request. */
  maxBodyBytes: number;
  hugeBytes: number;
  sent: number;
  byStatus: Record<string, number>;
  failures: Failure[];
  /** The slowest requests: where the time went (and what may block others). */
  slowest: { index: number; kind: string; status: number | null; ms: number }[];
  /** Post-run checks: name -> null when fine, else what went wrong. */
  after: Record<string, string | null>;
  seconds: number;
}

/** 503s that mean "busy, retry": expected under load, not a fault. */
const BUSY_CODES = new Set(['overloaded', 'too_many_connections']);

function judge(req: HostileRequest, o: Outcome): string | null {
  if (o.end === 'unanswered') return `unanswered after ${o.ms} ms`;
  if (o.status !== null && o.status >= 500 && !(o.status === 503 && BUSY_CODES.has(o.errorCode ?? ''))) return `${o.status} ${o.errorCode ?? ''}`.trim();
  if (o.status === 200 && o.errorType === 'server_error') return `200 with a stream error ${o.errorCode ?? ''}`.trim();
  // A request sent whole is owed an answer; a bare close is only fine when we cut or dropped it.
  if (o.end === 'closed' && req.delivery === 'send') return 'closed without a response';
  return null;
}

const SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 10 }, n: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['name', 'n'],
  additionalProperties: false,
};

async function postJson(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

type ChatReply = { choices?: { message?: { content?: string | null; tool_calls?: { function: { name: string; arguments: string } }[] } }[] };

/** The server after the storm: healthy, a constrained request valid, a forced tool call made. */
async function checkAfter(url: string, model: string): Promise<Record<string, string | null>> {
  const out: Record<string, string | null> = {};
  try {
    const h = await fetch(`${url}/health`, { signal: AbortSignal.timeout(10_000) });
    out.health = h.status === 200 ? null : `/health ${h.status}: ${await h.text()}`;
  } catch (err) {
    out.health = `/health: ${(err as Error).message}`;
  }
  try {
    const r = await postJson(`${url}/v1/chat/completions`, {
      model,
      messages: [{ role: 'user', content: 'a name and a digit' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA, strict: true } },
      max_tokens: 64,
      temperature: 0,
    });
    const content = (r.json as ChatReply).choices?.[0]?.message?.content ?? '';
    const v = r.status === 200 ? (JSON.parse(content) as Record<string, unknown>) : null;
    out.json_schema = v && typeof v.name === 'string' && Number.isInteger(v.n) ? null : `${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`;
  } catch (err) {
    out.json_schema = (err as Error).message;
  }
  try {
    const r = await postJson(`${url}/v1/chat/completions`, {
      model,
      messages: [{ role: 'user', content: 'weather in Paris' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] } } }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 64,
      temperature: 0,
    });
    const call = (r.json as ChatReply).choices?.[0]?.message?.tool_calls?.[0];
    const args = call ? (JSON.parse(call.function.arguments) as Record<string, unknown>) : null;
    out.tool_call = r.status === 200 && call?.function.name === 'get_weather' && typeof args?.city === 'string' ? null : `${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`;
  } catch (err) {
    out.tool_call = (err as Error).message;
  }
  return out;
}

export async function runFuzz(o: FuzzOptions, onProgress: (done: number, total: number) => void = () => undefined): Promise<FuzzReport> {
  const t0 = performance.now();
  const { hostname, port } = new URL(o.url);
  const host = hostname.replace(/^\[|\]$/g, '');
  const indices = o.only ?? Array.from({ length: o.requests }, (_, i) => i);
  const byStatus: Record<string, number> = {};
  const failures: Failure[] = [];
  const timed: FuzzReport['slowest'] = [];
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < indices.length) {
      const req = hostileRequest(o.seed, indices[next++]!, o);
      const out = await sendRaw(host, Number(port), req, o.boundMs);
      const key = out.status !== null ? String(out.status) : out.end;
      byStatus[key] = (byStatus[key] ?? 0) + 1;
      timed.push({ index: req.index, kind: req.kind, status: out.status, ms: out.ms });
      const why = judge(req, out);
      if (why) failures.push({ index: req.index, kind: req.kind, why, outcome: out, request: req.bytes.subarray(0, 400).toString('latin1') });
      onProgress(++done, indices.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, o.concurrency) }, worker));
  const after = await checkAfter(o.url, o.model);
  failures.sort((a, b) => a.index - b.index);
  const slowest = timed.sort((a, b) => b.ms - a.ms).slice(0, 10);
  return { seed: o.seed, maxBodyBytes: o.maxBodyBytes, hugeBytes: o.hugeBytes, sent: indices.length, byStatus, failures, slowest, after, seconds: Math.round((performance.now() - t0) / 100) / 10 };
}

/** The report as text: counts by status, then each failure with its replay command. */
export function formatReport(r: FuzzReport): string {
  const lines = [`fuzz seed ${r.seed}: ${r.sent} requests in ${r.seconds} s`];
  lines.push(
    '  by status: ' +
      Object.entries(r.byStatus)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `${k}=${v}`)
        .join(' '),
  );
  lines.push(`  failures: ${r.failures.length}`);
  const replay = `node bench/run.js fuzz --seed ${r.seed} --max-body-bytes ${r.maxBodyBytes} --huge-bytes ${r.hugeBytes} --only`;
  if (r.failures.length > 0) lines.push(`  replay one: ${replay} INDEX`);
  for (const f of r.failures.slice(0, 50)) {
    lines.push(`  #${f.index} ${f.kind}: ${f.why} (${f.outcome.ms} ms)`);
    lines.push(`      response: ${f.outcome.excerpt.replace(/\s+/g, ' ').slice(0, 200)}`);
    lines.push(`      request: ${f.request.replace(/\r\n/g, ' | ').slice(0, 200)}`);
  }
  lines.push('  slowest: ' + r.slowest.map((s) => `#${s.index} ${s.kind} ${s.status ?? '-'} ${s.ms} ms`).join('; '));
  for (const [name, problem] of Object.entries(r.after)) lines.push(`  after: ${name} ${problem === null ? 'ok' : `FAILED ${problem}`}`);
  return lines.join('\n');
}
