// The coherence gate: every golden item sent to a real `rapid serve` (in-process, loopback, an
// ephemeral port, one server per run) as an OpenAI chat request, greedy, at each requested
// concurrency; json items go through structured output with their schema. Scored by check-output.ts.
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { startServer } from '../../app/start-server.js';
import { categoryGroup, checkOutput, namedAbsent } from './check-output.js';
import { goldenImagePath, loadGoldenSet, type GoldenItem, type GoldenSet } from './golden-set.js';

export interface ItemResult {
  id: string;
  category: string;
  ok: boolean;
  why: string;
  output: string;
  expected: unknown;
}

export interface GateRun {
  concurrency: number;
  passed: number;
  total: number;
  score: number; // passed / total, 0..1
  perCategory: Record<string, { passed: number; total: number }>;
  /** Answers on single-shape pictures naming a shape kind not in the picture (items with `absent`). */
  hallucinations: number;
  results: ItemResult[]; // in golden-set order
}

export interface CoherenceReport {
  model: string;
  goldenDir: string;
  precision: 'exact' | 'fast';
  minScore: number; // 0..1
  perCategory: boolean; // minScore applies to each category too, and one hallucination fails
  runs: GateRun[];
  ok: boolean; // every run scored at least minScore (and, with perCategory, every category; no hallucination)
}

export interface CoherenceOptions {
  goldenDir: string;
  concurrencies?: number[]; // default [1, 16]
  minScore?: number; // 0..1, default 0.95
  precision?: 'exact' | 'fast'; // default fast, as `rapid serve`
  threads?: number;
  maxTokens?: number; // default 256, as the reference generation
  perCategory?: boolean; // default false: the threshold on the whole set only
  onProgress?: (line: string) => void;
}

type ContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

/** The media type a data URL names for a golden image (PNG or JPEG sets). */
function imageMime(path: string): string {
  const ext = extname(path).toLowerCase();
  return ext === '.jpg' || ext === '.jpeg' ? 'image/jpeg' : 'image/png';
}

/** The chat request body for one item: the user turn is [image, text] as in training. */
export function goldenRequest(set: GoldenSet, item: GoldenItem, maxTokens: number): Record<string, unknown> {
  const image = goldenImagePath(set, item);
  const content: string | ContentPart[] =
    image === null
      ? item.prompt
      : [
          { type: 'image_url', image_url: { url: `data:${imageMime(image)};base64,${readFileSync(image).toString('base64')}` } },
          { type: 'text', text: item.prompt },
        ];
  const body: Record<string, unknown> = {
    messages: [{ role: 'user', content }],
    temperature: 0,
    repetition_penalty: 1,
    max_tokens: maxTokens,
  };
  const schema = set.schemas.get(item.id);
  if (schema !== undefined) body.response_format = { type: 'json_schema', json_schema: { name: 'golden', schema, strict: true } };
  return body;
}

async function post(url: string, body: string): Promise<Response> {
  const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body };
  try {
    return await fetch(`${url}/v1/chat/completions`, init);
  } catch {
    // A transport failure before any answer (a reused keep-alive socket closing under us): greedy
    // requests are idempotent, so one retry cannot change a score; a dead server fails it again.
    return fetch(`${url}/v1/chat/completions`, init);
  }
}

async function ask(url: string, body: string): Promise<string> {
  const res = await post(url, body);
  const text = await res.text();
  if (!res.ok) throw new Error(`server answered ${res.status}: ${text.slice(0, 300)}`);
  const json = JSON.parse(text) as { choices: { message: { content: string | null } }[] };
  return json.choices[0]?.message.content ?? '';
}

/** Runs `fn` over `items` with at most `limit` in flight; results keep the input order. */
async function pool<T, R>(items: T[], limit: number, fn: (x: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Scores outputs (by item id) against the golden set: the same arithmetic for rapid and a reference. */
export function scoreOutputs(set: GoldenSet, outputs: Map<string, string> | Record<string, string>, concurrency = 0): GateRun {
  const get = (id: string) => (outputs instanceof Map ? outputs.get(id) : outputs[id]);
  const results: ItemResult[] = set.items.map((it) => {
    const output = get(it.id);
    if (output === undefined) return { id: it.id, category: it.category, ok: false, why: 'no output', output: '', expected: it.expected };
    const c = checkOutput(it, output, set.words);
    return { id: it.id, category: it.category, ok: c.ok, why: c.why, output, expected: it.expected };
  });
  const perCategory: GateRun['perCategory'] = {};
  for (const r of results) {
    const g = (perCategory[categoryGroup(r.category)] ??= { passed: 0, total: 0 });
    g.total++;
    if (r.ok) g.passed++;
  }
  const passed = results.filter((r) => r.ok).length;
  const byId = new Map(set.items.map((it) => [it.id, it]));
  const hallucinations = results.filter((r) => namedAbsent(r.output, byId.get(r.id)?.absent ?? []).length > 0).length;
  return { concurrency, passed, total: results.length, score: results.length ? passed / results.length : 0, perCategory, hallucinations, results };
}

/** Whether a run passes: the whole set at minScore; with perCategory also each category, and no hallucination. */
export function runPasses(run: GateRun, minScore: number, perCategory: boolean): boolean {
  if (run.score < minScore) return false;
  if (!perCategory) return true;
  return run.hallucinations === 0 && Object.values(run.perCategory).every((c) => c.passed / c.total >= minScore);
}

/** Starts `rapid serve` on MODEL_DIR, runs the golden set at each concurrency, stops the server. */
export async function runCoherenceGate(modelDir: string, opts: CoherenceOptions): Promise<CoherenceReport> {
  const set = loadGoldenSet(opts.goldenDir);
  const concurrencies = opts.concurrencies ?? [1, 16];
  const minScore = opts.minScore ?? 0.95;
  const precision = opts.precision ?? 'fast';
  const maxTokens = opts.maxTokens ?? 256;
  // The bodies (images inlined as base64) are the same at every concurrency: built once.
  const bodies = set.items.map((it) => JSON.stringify(goldenRequest(set, it, maxTokens)));
  const runs: GateRun[] = [];
  for (const c of concurrencies) {
    // A fresh server per run: no prefix or image-embedding cache carried over from the previous run.
    const srv = await startServer(modelDir, {
      port: 0,
      host: '127.0.0.1',
      precision,
      threads: opts.threads,
      maxNumSeqs: Math.max(16, c),
      servedModelName: 'coherence',
      shutdownGrace: 5,
    });
    try {
      opts.onProgress?.(`coherence: ${set.items.length} golden items at concurrency ${c}`);
      const outs = await pool(bodies, c, (body) => ask(srv.url, body));
      runs.push(scoreOutputs(set, new Map(set.items.map((it, i) => [it.id, outs[i]!])), c));
    } finally {
      await srv.close(5000);
    }
  }
  const perCategory = opts.perCategory ?? false;
  return { model: modelDir, goldenDir: set.dir, precision, minScore, perCategory, runs, ok: runs.every((r) => runPasses(r, minScore, perCategory)) };
}
