// The user steps of a replica check, shared by bench:replicas and test/models/replica-e2e.test.ts: the CLI
// in a child process (asynchronous, so an in-process hub keeps answering), `rapid serve` until it logs
// its URL, and the first answer over HTTP that must be right at any weights (a VLM's with a photo).
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import sharp from 'sharp';

export const RAPID_BIN = join(resolve(import.meta.dirname, '..', '..'), 'bin', 'rapid.js');

export interface Exit {
  code: number | null;
  out: string;
  err: string;
  seconds: number;
}

/** `node file args...`, killed after timeoutMs. */
export function runCli(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Exit> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [file, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((ok) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => (clearTimeout(timer), ok({ code, out, err, seconds: (performance.now() - t0) / 1000 })));
  });
}

/** `rapid serve` until it logs its URL; resolves with the URL or the reason it has none. */
export function serveCli(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ child: ChildProcess; url?: string; err: () => string }> {
  const child = spawn(process.execPath, [RAPID_BIN, 'serve', '--port', '0', ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((ok) => {
    const timer = setTimeout(() => (child.kill('SIGKILL'), ok({ child, err: () => `${err}\nno URL within ${timeoutMs / 1000} s` })), timeoutMs);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /serving .* on (http:\/\/[^\s]+)\/v1/.exec(err);
      if (m) (clearTimeout(timer), ok({ child, url: m[1]!, err: () => err }));
    });
    child.on('exit', () => (clearTimeout(timer), ok({ child, err: () => err })));
  });
}

/** The schema every constrained answer must match: constrained decoding makes it hold at random weights. */
export const SCHEMA = {
  type: 'object',
  properties: { colour: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['colour', 'count'],
  additionalProperties: false,
};

async function post(url: string, body: unknown, timeoutMs: number): Promise<{ status: number; json: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
  return { status: res.status, json: await res.json() };
}

/** Throws unless `content` parses and matches SCHEMA. */
export function checkPick(content: string): void {
  const v = JSON.parse(content) as { colour?: unknown; count?: unknown };
  if (!['red', 'green', 'blue'].includes(v.colour as string) || !Number.isInteger(v.count) || Object.keys(v).length !== 2) throw new Error(`json_schema output does not match: ${content}`);
}

/** A real JPEG (gradients and a checker pattern; 448x336 by default: 4:3 like a photo, small enough for a 2-core CPU
 *  tower). */
export async function photoJpeg(w = 448, h = 336): Promise<Buffer> {
  const px = Buffer.alloc(w * h * 3);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = (y * w + x) * 3;
      px[i] = Math.floor((x * 255) / w);
      px[i + 1] = Math.floor((y * 255) / h);
      px[i + 2] = ((x >> 4) + (y >> 4)) % 2 ? 220 : 30;
    }
  }
  return sharp(px, { raw: { width: w, height: h, channels: 3 } }).jpeg({ quality: 85 }).toBuffer();
}

/**
 * The first answer over HTTP: a constrained chat completion that must parse and match (with `image`, a VLM's
 * user turn carries it as a data URL), or an embedding.
 */
export async function firstAnswer(url: string, model: string, embedding: boolean, timeoutMs: number, image?: Buffer): Promise<string> {
  if (embedding) {
    const r = await post(`${url}/v1/embeddings`, { model, input: ['a full-size replica'] }, timeoutMs);
    const dims = (r.json as { data?: { embedding: number[] }[] }).data?.[0]?.embedding.length;
    if (r.status !== 200 || !dims) throw new Error(`/v1/embeddings answered ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
    return `embedding of ${dims}`;
  }
  const text = 'Pick a colour and a count.';
  const content = image ? [{ type: 'image_url', image_url: { url: `data:image/jpeg;base64,${image.toString('base64')}` } }, { type: 'text', text }] : text;
  const r = await post(`${url}/v1/chat/completions`, {
    model,
    messages: [{ role: 'user', content }],
    max_tokens: 32,
    temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: SCHEMA } },
  }, timeoutMs);
  const answer = (r.json as { choices?: { message: { content: string } }[] }).choices?.[0]?.message.content;
  if (r.status !== 200 || answer === undefined) throw new Error(`/v1/chat/completions answered ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
  checkPick(answer);
  return `json ${answer}`;
}
