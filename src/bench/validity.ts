// Structured-output validity sweep (issue 38): a real server on a fixture checkpoint; at each
// concurrency level, R runs of that many simultaneous requests, half constrained (six schemas and
// json_object; sampled, seeded, max_tokens from the schema's shortest output to 24 tokens past it,
// so many are cut) and half free text, every third streamed. Every constrained reply must parse,
// validate (ajv) and hold no U+FFFD. Prints one row per level; exit code 1 below 100%.
//   npm run bench:validity [-- --model DIR --levels 1,2,4 --runs 3 --seed 0 --temperature 1
//     --no-budget-close --json]
import { parseArgs } from 'node:util';
import { startServer } from '../app/start-server.js';
import { VALIDITY_SCHEMAS } from './validity-schemas.js';

export interface ValidityLevel {
  concurrency: number;
  runs: number;
  schemaReplies: number;
  valid: number;
  /** Valid replies the budget ended (finish_reason "length"). */
  cutValid: number;
  /** Replies holding U+FFFD. */
  replacement: number;
  plainReplies: number;
  /** Requests that failed outright (HTTP error, transport). */
  errors: number;
  failures: string[];
}

export interface ValidityOptions {
  model: string;
  levels: number[];
  runs: number;
  budgetClose: boolean;
  threads?: number;
  /** Offsets every request's seed and prompt: another sample of the same sweep. */
  seed?: number;
  /** Sampling temperature of every request (default 1; 0 is greedy, where speculative rows run). */
  temperature?: number;
}

interface Reply {
  text: string;
  finish: string | null;
}

type Body = Record<string, unknown>;

async function chat(url: string, body: Body, stream: boolean): Promise<Reply> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream }) });
  if (!stream) {
    const j = (await res.json()) as { choices?: { message: { content: string | null }; finish_reason: string }[]; error?: { message: string } };
    if (!res.ok || !j.choices) throw new Error(`HTTP ${res.status}: ${j.error?.message ?? ''}`);
    return { text: j.choices[0]!.message.content ?? '', finish: j.choices[0]!.finish_reason };
  }
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let text = '';
  let finish: string | null = null;
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const c = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string }; finish_reason?: string | null }[]; error?: { message: string } };
    if (c.error) throw new Error(c.error.message);
    text += c.choices?.[0]?.delta?.content ?? '';
    finish = c.choices?.[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

/** The shortest output of a schema in tokens, as the server's 400 for max_tokens 1 states it. */
async function shortestOutput(url: string, model: string, schema: unknown): Promise<number> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1, response_format: { type: 'json_schema', json_schema: { name: 's', schema, strict: true } } }),
  });
  const m = /takes (\d+) tokens/.exec(await res.text());
  return m ? Number(m[1]) : 1;
}

export async function runValiditySweep(opts: ValidityOptions): Promise<ValidityLevel[]> {
  const maxC = Math.max(...opts.levels);
  const srv = await startServer(opts.model, {
    port: 0,
    threads: opts.threads ?? 2,
    precision: 'exact',
    kvCacheMemory: 64 << 20,
    blockSize: 16,
    maxNumSeqs: Math.max(16, maxC),
    maxBatchedTokens: 512,
    servedModelName: 'm',
  });
  try {
    // ajv is CommonJS: under ESM the class is the named export or default (or default.default).
    const mod = (await import('ajv')) as { default?: { default?: unknown }; Ajv?: unknown };
    const Ajv = (mod.Ajv ?? mod.default?.default ?? mod.default) as new (o: object) => { compile(s: object): (v: unknown) => boolean };
    const ajv = new Ajv({ strict: false });
    const schemas = [...VALIDITY_SCHEMAS, { type: 'object' }];
    const validators = schemas.map((s) => ajv.compile(s));
    const least = await Promise.all(schemas.map((s) => shortestOutput(srv.url, 'm', s)));
    const out: ValidityLevel[] = [];
    for (const c of opts.levels) {
      const level: ValidityLevel = { concurrency: c, runs: opts.runs, schemaReplies: 0, valid: 0, cutValid: 0, replacement: 0, plainReplies: 0, errors: 0, failures: [] };
      for (let run = 0; run < opts.runs; run++) {
        await Promise.all(
          Array.from({ length: c }, async (_, i) => {
            const k = c * 1009 + run * 131 + i + (opts.seed ?? 0) * 100_003;
            // Every schema in turn, then json_object (index VALIDITY_SCHEMAS.length: any object).
            const schemaIdx = i % 2 === 0 ? (k >> 1) % (VALIDITY_SCHEMAS.length + 1) : -1;
            const body: Body = { model: 'm', messages: [{ role: 'user', content: `item ${k}: describe it` }], temperature: opts.temperature ?? 1, seed: k };
            if (schemaIdx >= 0) {
              const schema = VALIDITY_SCHEMAS[schemaIdx];
              body.response_format = schema ? { type: 'json_schema', json_schema: { name: 's', schema, strict: true } } : { type: 'json_object' };
              body.max_tokens = least[schemaIdx]! + ((k * 7) % 25);
              if (!opts.budgetClose) body.rapid_budget_close = false;
            } else body.max_tokens = 16;
            let r: Reply;
            try {
              r = await chat(srv.url, body, k % 3 === 0);
            } catch (err) {
              level.errors++;
              level.failures.push(`c=${c} run ${run} #${i}: ${(err as Error).message}`);
              return;
            }
            if (schemaIdx < 0) {
              level.plainReplies++;
              return;
            }
            level.schemaReplies++;
            if (r.text.includes('\uFFFD')) level.replacement++;
            let ok = false;
            try {
              ok = validators[schemaIdx]!(JSON.parse(r.text)) && !r.text.includes('\uFFFD');
            } catch {
              ok = false;
            }
            if (ok) {
              level.valid++;
              if (r.finish === 'length') level.cutValid++;
            } else level.failures.push(`c=${c} run ${run} #${i} schema ${schemaIdx} (${r.finish}): ${r.text.slice(0, 120)}`);
          }),
        );
      }
      out.push(level);
    }
    return out;
  } finally {
    await srv.close(1000);
  }
}

export function validityTable(levels: readonly ValidityLevel[]): string {
  const rows = [['concurrency', 'runs', 'schema replies', 'valid', 'valid %', 'cut by max_tokens (valid)', 'with U+FFFD', 'plain replies', 'errors']];
  let replies = 0;
  let valid = 0;
  for (const l of levels) {
    replies += l.schemaReplies;
    valid += l.valid;
    rows.push([l.concurrency, l.runs, l.schemaReplies, l.valid, pct(l.valid, l.schemaReplies), l.cutValid, l.replacement, l.plainReplies, l.errors].map(String));
  }
  rows.push(['all', '', String(replies), String(valid), pct(valid, replies), '', '', '', '']);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => cell.padStart(widths[i]!)).join('  ')).join('\n');
}

const pct = (a: number, b: number) => (b === 0 ? '-' : `${((100 * a) / b).toFixed(1)}%`);

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string' },
      levels: { type: 'string' },
      runs: { type: 'string' },
      threads: { type: 'string' },
      seed: { type: 'string' },
      temperature: { type: 'string' },
      'no-budget-close': { type: 'boolean' },
      json: { type: 'boolean' },
    },
  });
  const levels = await runValiditySweep({
    model: values.model ?? 'test/fixtures/models/llama-q4',
    levels: (values.levels ?? '1,2,4,8,16,32,64').split(',').map(Number),
    runs: Number(values.runs ?? 3),
    threads: values.threads !== undefined ? Number(values.threads) : undefined,
    budgetClose: values['no-budget-close'] !== true,
    seed: Number(values.seed ?? 0),
    temperature: Number(values.temperature ?? 1),
  });
  if (values.json) process.stdout.write(`${JSON.stringify(levels, null, 2)}\n`);
  else {
    process.stdout.write(`${validityTable(levels)}\n`);
    for (const f of levels.flatMap((l) => l.failures).slice(0, 20)) process.stdout.write(`  ${f}\n`);
  }
  const bad = levels.some((l) => l.valid !== l.schemaReplies || l.errors > 0);
  return bad ? 1 : 0;
}
