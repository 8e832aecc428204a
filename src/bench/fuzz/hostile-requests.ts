// A seeded generator of hostile HTTP requests for the OpenAI-compatible server: valid chat and
// completion requests mutated (type swaps, extreme numbers, deep nesting, huge arrays and strings,
// odd unicode, bad schemas, tools and images, unknown fields), non-JSON and truncated bodies, wrong
// methods, paths and headers, and aborted connections. Request i depends only on (seed, i), so one
// failure replays alone with `--seed S --only i`.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** How the bytes go out: all of them; fewer than declared, then silence; or part, then a hang-up. */
export type Delivery = 'send' | 'truncate' | 'abort';

export interface HostileRequest {
  index: number;
  /** What was done to it, e.g. "chat-schema+extreme-number(top_k)". */
  kind: string;
  /** The whole request as sent: request line, headers and body (a body may be cut by `delivery`). */
  bytes: Buffer;
  delivery: Delivery;
  /** For 'truncate' and 'abort': how many bytes go out. */
  sendBytes?: number;
}

export interface GeneratorOptions {
  /** The served model name the valid bases carry. */
  model: string;
  /** Bodies stay below this (the server's --max-body-bytes), a few aside to exercise the 413. */
  maxBodyBytes: number;
  /** Largest huge string or array body part (CI keeps it small; the bench goes further). */
  hugeBytes: number;
}

/** mulberry32: small, fast, good enough to pick mutations reproducibly. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

/** The generator of request `index` under `seed`, independent of every other index. */
export function rngFor(seed: number, index: number): Rng {
  let h = (Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d) >>> 0;
  return new Rng(h ^ (h >>> 15));
}

const WORDS = ['river', 'stone', 'cloud', 'paper', 'seven', 'north', 'quiet', 'garden', 'market', 'silver'];
const words = (r: Rng, n: number) => Array.from({ length: n }, () => r.pick(WORDS)).join(' ');

const SCHEMA: Json = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, count: { type: 'integer', minimum: 0, maximum: 99 }, ok: { type: 'boolean' } },
  required: ['name', 'count', 'ok'],
  additionalProperties: false,
};

const WEATHER_TOOL: Json = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city'] },
  },
};

/** A 1x1 PNG: a valid image the text model must refuse with a 400. */
const PNG_1X1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** Valid requests: [path, body]. Each is answered 200 by a healthy server on a text model (images: 400). */
function base(r: Rng, model: string): [string, { [key: string]: Json }] {
  const maxTokens = 1 + r.int(12);
  const user = { role: 'user', content: words(r, 1 + r.int(12)) };
  const chat = (extra: { [key: string]: Json }): [string, { [key: string]: Json }] => [
    '/v1/chat/completions',
    { model, messages: [user], max_tokens: maxTokens, temperature: r.pick([0, 0.7, 1]), ...extra },
  ];
  switch (r.int(12)) {
    case 0:
      return chat({});
    case 1:
      return chat({ stream: true, stream_options: { include_usage: true } });
    case 2:
      return chat({ response_format: { type: 'json_schema', json_schema: { name: 'thing', schema: SCHEMA, strict: true } }, max_tokens: 48 });
    case 3:
      return chat({ response_format: { type: 'json_object' }, max_tokens: 24 });
    case 4:
      return chat({ tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 40 });
    case 5:
      return chat({ tools: [WEATHER_TOOL], tool_choice: r.pick(['auto', 'none', 'required']), max_tokens: 24 });
    case 6:
      return chat({ logprobs: true, top_logprobs: r.int(6), top_p: 0.9, top_k: 40, min_p: 0.05, seed: r.int(1000), presence_penalty: 0.5, frequency_penalty: 0.3, stop: ['\n', 'stone'] });
    case 7:
      return chat({
        messages: [
          { role: 'system', content: 'Be brief.' },
          user,
          { role: 'assistant', content: words(r, 3) },
          { role: 'user', content: [{ type: 'text', text: words(r, 4) }] },
        ],
      });
    case 8:
      return chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_1X1}` } }, { type: 'text', text: 'what is this' }] }] });
    case 9:
      return ['/v1/completions', { model, prompt: words(r, 1 + r.int(10)), max_tokens: maxTokens, temperature: 0, logprobs: r.int(3) }];
    case 10:
      return ['/v1/completions', { model, prompt: Array.from({ length: 1 + r.int(20) }, () => r.int(1000)), max_tokens: maxTokens, stream: r.chance(0.5) }];
    default:
      return ['/v1/completions', { model, prompt: words(r, 5), max_tokens: maxTokens, stop: ['.'], seed: 7, top_p: 0.5, echo: r.chance(0.3) }];
  }
}

// Placeholders for bodies JSON.stringify cannot build (nesting deeper than its recursion) or that
// are cheaper as text: swapped in after stringify.
const DEEP = '\u0001DEEP:';

const UNICODE = ['\ud800', '\udfff', 'a\ud83dz', '\u0000', '\u202e\u202d', '\ufeff\uffff\ufffe', 'e\u0301\u0301\u0301', '😀'.repeat(50), '\u0085\u2028\u2029', '<|im_start|>system\n', '{{ 7*7 }}{% for x in range(99999999) %}'];

const EXTREMES: Json[] = [0, -1, -0.5, 1e308, -1e308, 1e10, 2 ** 53 + 1, 2 ** 64, 1e-320, 0.1, 3.5, 1e-7, 1024, 65536, 2 ** 31, -(2 ** 31), '1', '', true, null, [], {}];

const SAMPLING_KEYS = ['max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'top_logprobs', 'logprobs', 'n', 'best_of'];

function hostileSchema(r: Rng): Json {
  const deep = (n: number): Json => (n === 0 ? { type: 'string' } : { type: 'object', properties: { a: deep(n - 1) }, required: ['a'] });
  switch (r.int(14)) {
    case 0:
      return { $ref: '#' };
    case 1:
      return { $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' };
    case 2:
      return deep(r.pick([8, 20, 60, 200]));
    case 3:
      return { type: 'string', enum: Array.from({ length: r.pick([10, 1000, 20000]) }, (_, i) => `v${i}`) };
    case 4:
      return { type: 'string', pattern: r.pick(['(', '[z-a]', '(a+)+$', '\\', '.{1000000}']) };
    case 5:
      return { type: r.pick(['foo', 7, null, ['string', 'banana']]) as Json };
    case 6:
      return { type: 'string', minLength: 10, maxLength: 2 };
    case 7:
      return { type: 'object', properties: Object.fromEntries(Array.from({ length: r.pick([100, 2000]) }, (_, i) => [`p${i}`, { type: 'integer' }])) };
    case 8:
      return { anyOf: [] };
    case 9:
      return { type: 'integer', minimum: 10, maximum: 1 };
    case 10:
      return { type: 'array', items: false, minItems: 5 };
    case 11:
      return { const: `${DEEP}${r.pick([50, 1000, 20000])}` };
    case 12:
      return { type: 'string', format: 'no-such-format', maxLength: -1 };
    default:
      return `${DEEP}${r.pick([100, 5000])}`;
  }
}

function hostileTools(r: Rng, body: { [key: string]: Json }): void {
  switch (r.int(9)) {
    case 0:
      body.tools = 'get_weather';
      break;
    case 1:
      body.tools = [{ type: 'function' }];
      break;
    case 2:
      body.tools = [{ type: 'function', function: { name: r.pick(['', 'a b', '💥', 'x'.repeat(500)]), parameters: {} } }];
      break;
    case 3:
      body.tools = [{ type: 'function', function: { name: 'f', parameters: hostileSchema(r) } }];
      body.tool_choice = { type: 'function', function: { name: 'f' } };
      break;
    case 4:
      body.tools = [WEATHER_TOOL, WEATHER_TOOL];
      break;
    case 5:
      body.tools = [WEATHER_TOOL];
      body.tool_choice = { type: 'function', function: { name: 'nope' } };
      break;
    case 6:
      delete body.tools;
      body.tool_choice = 'required';
      break;
    case 7:
      body.tools = Array.from({ length: r.pick([100, 2000]) }, (_, i) => ({ type: 'function', function: { name: `f${i}`, parameters: { type: 'object' } } }));
      break;
    default:
      body.tools = [WEATHER_TOOL];
      body.tool_choice = r.pick<Json>([7, 'sometimes', { type: 'function' }, { type: 'function', function: {} }]);
  }
}

function hostileImage(r: Rng): Json {
  const url = r.pick([
    'data:image/png;base64,!!!not-base64!!!',
    'data:image/png;base64,',
    'data:image/png;base64,AAAA',
    `data:image/png;base64,${PNG_1X1.slice(0, 30)}`,
    `data:text/html;base64,${PNG_1X1}`,
    'data:image/png,rawbytes',
    'file:///etc/passwd',
    'http://169.254.169.254/latest/meta-data/',
    'http://127.0.0.1:1/x.png',
    'javascript:alert(1)',
    '',
  ]);
  return { role: 'user', content: [{ type: 'image_url', image_url: r.chance(0.8) ? { url, detail: r.pick(['low', 'high', 'auto', 'ultra']) } : url }, { type: 'text', text: 'describe' }] };
}

/** Every node of a JSON tree with its parent and key, so a mutation can replace it. */
function nodes(v: Json, out: { parent: Json[] | { [key: string]: Json }; key: string | number; value: Json }[] = []) {
  if (Array.isArray(v)) v.forEach((x, i) => (out.push({ parent: v, key: i, value: x }), nodes(x, out)));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) out.push({ parent: v, key: k, value: x }), nodes(x, out);
  return out;
}

function randomValue(r: Rng, opts: GeneratorOptions): Json {
  switch (r.int(8)) {
    case 0:
      return null;
    case 1:
      return r.chance(0.5);
    case 2:
      return r.pick(EXTREMES);
    case 3:
      return r.pick(UNICODE);
    case 4:
      return 'x'.repeat(r.int(Math.min(opts.hugeBytes, 4096)));
    case 5:
      return [];
    case 6:
      return {};
    default:
      return [r.pick(EXTREMES), r.pick(UNICODE)];
  }
}

function set(parent: Json[] | { [key: string]: Json }, key: string | number, value: Json): void {
  (parent as Record<string | number, Json>)[key] = value;
}

/** One mutation of `body` in place; returns its label. */
function mutate(r: Rng, body: { [key: string]: Json }, opts: GeneratorOptions): string {
  const all = nodes(body);
  const any = () => r.pick(all);
  const huge = () => Math.max(1, Math.floor(opts.hugeBytes * (0.05 + 0.95 * r.next())));
  switch (r.int(13)) {
    case 0: {
      const n = any();
      set(n.parent, n.key, randomValue(r, opts));
      return `type-swap(${n.key})`;
    }
    case 1: {
      const key = r.pick(SAMPLING_KEYS);
      body[key] = r.pick(EXTREMES);
      return `extreme-number(${key})`;
    }
    case 2: {
      const n = any();
      if (Array.isArray(n.parent)) n.parent.splice(Number(n.key), 1);
      else delete n.parent[n.key as string];
      return `delete(${n.key})`;
    }
    case 3: {
      const objects = [body, ...all.map((n) => n.value).filter((v): v is { [key: string]: Json } => v !== null && typeof v === 'object' && !Array.isArray(v))];
      r.pick(objects)[r.pick(['foo', '__proto__', 'constructor', 'n', 'functions', 'prompt', 'messages', 'x'.repeat(300)])] = randomValue(r, opts);
      return 'unknown-field';
    }
    case 4: {
      const n = any();
      const depth = r.pick([10, 100, 1000, 5000, 50000]);
      set(n.parent, n.key, `${DEEP}${depth}`);
      return `deep-nesting(${n.key},${depth})`;
    }
    case 5: {
      const target = r.pick(['messages', 'prompt', 'stop', 'tools', 'logit_bias_keys']);
      const count = Math.min(r.pick([100, 1000, 20000, 100000]), Math.floor(huge() / 8) + 1);
      if (target === 'messages') body.messages = Array.from({ length: count }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hi' }));
      else if (target === 'prompt') body.prompt = Array.from({ length: count }, (_, i) => i % 1000);
      else if (target === 'stop') body.stop = Array.from({ length: count }, (_, i) => `s${i}`);
      else if (target === 'tools') hostileTools(r, body);
      else body.logit_bias = Object.fromEntries(Array.from({ length: count }, (_, i) => [String(i), r.pick([100, -100, 1e9])]));
      return `huge-array(${target},${count})`;
    }
    case 6: {
      const text = r.pick(['a', 'word ', '😀', '<|im_end|>', '\u0000']).repeat(huge());
      if ('messages' in body) body.messages = [{ role: 'user', content: text.slice(0, huge()) }];
      else body.prompt = text.slice(0, huge());
      return 'huge-string';
    }
    case 7: {
      const strings = all.filter((n) => typeof n.value === 'string');
      const n = strings.length > 0 ? r.pick(strings) : any();
      set(n.parent, n.key, r.pick(UNICODE) + r.pick(UNICODE));
      return `unicode(${n.key})`;
    }
    case 8:
      body.response_format = r.chance(0.8) ? { type: 'json_schema', json_schema: { name: 's', schema: hostileSchema(r) } } : r.pick<Json>([{ type: 'json_schema' }, { type: 'xml' }, 'json', { type: 'json_schema', json_schema: { schema: {} } }]);
      return 'bad-schema';
    case 9:
      hostileTools(r, body);
      return 'bad-tools';
    case 10:
      body.messages = [hostileImage(r)];
      return 'bad-image';
    case 11:
      body.messages = [r.pick<Json>([{ role: 'wizard', content: 'hi' }, { role: 'user' }, { role: 'user', content: 7 }, { role: 'tool', content: 'x' }, { role: 'assistant', tool_calls: [{ id: 1, function: { name: 'f', arguments: '{' } }] }, { role: 'user', content: [{ type: 'video', video: 'x' }] }, 'hi', null])];
      return 'bad-message';
    default: {
      const key = r.pick(['stream', 'stream_options', 'n', 'model', 'echo', 'suffix', 'chat_template_kwargs', 'logit_bias']);
      body[key] = randomValue(r, opts);
      return `field(${key})`;
    }
  }
}

/** JSON text of a mutated body with the deep-nesting placeholders expanded (lone surrogates kept as escapes). */
function bodyText(body: Json): string {
  return JSON.stringify(body).replace(/"\\u0001DEEP:(\d+)"/g, (_, n: string) => {
    const d = Number(n);
    return '['.repeat(d) + '1' + ']'.repeat(d);
  });
}

const PATHS = ['/v1/chat/completions', '/v1/completions'];
const WRONG_PATHS = [
  '/',
  '/v1',
  '/v1/chat/completion',
  '/v1/chat/completions/x',
  '/V1/CHAT/COMPLETIONS',
  '/v1/../v1/models',
  '/v1/models/%2e%2e%2fetc',
  '/v1/models/%E0%A4%A',
  '/%00',
  '//[',
  '/v1/models/' + 'z'.repeat(6000),
  '/v1/embeddings',
  '/v1/responses',
  '/metrics?x=' + '%'.repeat(50),
  '/health?' + 'a=1&'.repeat(500),
];

function request(method: string, path: string, headers: Record<string, string>, body: Buffer | string = ''): Buffer {
  const b = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const h = { host: 'fuzz', connection: 'close', ...(method === 'GET' || method === 'HEAD' ? {} : { 'content-length': String(b.length) }), ...headers };
  const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(h)
    .filter(([, v]) => v !== '')
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

const JSON_TYPE = { 'content-type': 'application/json' };

/** Requests that are wrong below the JSON: bodies, methods, paths, headers, framing. */
function rawKind(r: Rng, opts: GeneratorOptions): Omit<HostileRequest, 'index'> {
  const [path, valid] = base(r, opts.model);
  const text = bodyText(valid);
  switch (r.int(12)) {
    case 0: {
      const cut = r.int(text.length);
      return { kind: 'truncated-json', bytes: request('POST', path, JSON_TYPE, text.slice(0, cut)), delivery: 'send' };
    }
    case 1: {
      const bytes = Buffer.from(Array.from({ length: 1 + r.int(2000) }, () => r.int(256)));
      return { kind: 'garbage-body', bytes: request('POST', path, JSON_TYPE, bytes), delivery: 'send' };
    }
    case 2:
      return { kind: 'json-primitive', bytes: request('POST', path, JSON_TYPE, r.pick(['', 'null', '[]', '"x"', '1', 'true', '{}', '{"messages":[]}', '[{"role":"user"}]'])), delivery: 'send' };
    case 3: {
      const method = r.pick(['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'TRACE', 'CONNECT']);
      const target = method === 'CONNECT' ? 'fuzz:443' : r.pick([path, '/health', '/v1/models', '/metrics']);
      return { kind: `method(${method})`, bytes: request(method, target, JSON_TYPE, method === 'GET' || method === 'HEAD' ? '' : text), delivery: 'send' };
    }
    case 4: {
      const p = r.pick(WRONG_PATHS);
      return { kind: 'wrong-path', bytes: request(r.pick(['GET', 'POST']), p, JSON_TYPE, text), delivery: 'send' };
    }
    case 5: {
      const headers = r.pick<Record<string, string>>([
        { 'content-type': 'text/plain', origin: 'https://evil.example' },
        { 'content-type': 'application/x-www-form-urlencoded', origin: 'null' },
        { 'content-type': 'multipart/form-data; boundary=zz', 'sec-fetch-site': 'cross-site' },
        { 'content-type': 'application/x-www-form-urlencoded' },
        { 'content-type': '' },
        { 'content-type': 'application/json; charset=latin1' },
        { 'content-type': 'application/json', 'content-encoding': 'gzip' },
        { 'content-type': 'application/json', authorization: 'Bearer ' + 'k'.repeat(1000) },
        { 'content-type': 'application/json', accept: 'text/event-stream', 'accept-encoding': 'br, gzip' },
        { 'content-type': 'application/json', expect: '100-continue' },
      ]);
      return { kind: `headers(${Object.values(headers).join(',').slice(0, 40)})`, bytes: request('POST', path, headers, text), delivery: 'send' };
    }
    case 6: {
      const framing = r.int(8);
      const body = Buffer.from(text);
      const head = (extra: string) => Buffer.from(`POST ${path} HTTP/1.1\r\nhost: fuzz\r\nconnection: close\r\ncontent-type: application/json\r\n${extra}\r\n`, 'latin1');
      const chunks = (parts: Buffer[]) => Buffer.concat([...parts.flatMap((p) => [Buffer.from(`${p.length.toString(16)}\r\n`), p, Buffer.from('\r\n')]), Buffer.from('0\r\n\r\n')]);
      const bytes = [
        () => Buffer.concat([head(`content-length: ${Math.max(0, body.length - 5)}\r\n`), body]),
        () => Buffer.concat([head('content-length: abc\r\n'), body]),
        () => Buffer.concat([head(`content-length: ${body.length}\r\ntransfer-encoding: chunked\r\n`), body]),
        () => Buffer.concat([head('transfer-encoding: chunked\r\n'), chunks([body.subarray(0, body.length >> 1), body.subarray(body.length >> 1)])]),
        () => Buffer.concat([head('transfer-encoding: chunked\r\n'), Buffer.from('zz\r\nabc\r\n0\r\n\r\n')]),
        () => Buffer.concat([head(`content-length: ${body.length}\r\ncontent-length: 3\r\n`), body]),
        () => Buffer.concat([head(`x-big: ${'a'.repeat(r.pick([1000, 20000, 100000]))}\r\ncontent-length: ${body.length}\r\n`), body]),
        () => Buffer.from(r.pick(['GARBAGE\r\n\r\n', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', `POST ${path} HTTP/1.0\r\ncontent-length: 2\r\n\r\n{}`, `POST ${path} HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}`, '\r\n\r\n\r\n', `GET /health HTTP/1.1\r\nhost: fuzz\r\nx-nul: a\u0000b\r\n\r\n`]), 'latin1'),
      ][framing]!();
      return { kind: `framing(${framing})`, bytes, delivery: 'send' };
    }
    case 7: {
      const bytes = request('POST', path, JSON_TYPE, text);
      return { kind: 'truncated-body', bytes, delivery: 'truncate', sendBytes: bytes.length - 1 - r.int(Math.min(text.length, 50)) };
    }
    case 8:
    case 9: {
      const bytes = request('POST', path, JSON_TYPE, text);
      // Hang up mid-headers, mid-body, or right after the whole request (a client that gave up).
      return { kind: 'aborted', bytes, delivery: 'abort', sendBytes: r.pick([r.int(bytes.length), bytes.length]) };
    }
    case 10: {
      const big = Math.floor(opts.maxBodyBytes * (1 + r.next()));
      return { kind: 'oversized-body', bytes: request('POST', path, JSON_TYPE, Buffer.alloc(big, 0x20)), delivery: 'send' };
    }
    default:
      return { kind: 'valid', bytes: request('POST', path, JSON_TYPE, text), delivery: 'send' };
  }
}

/** Request `index` of the run under `seed`. */
export function hostileRequest(seed: number, index: number, opts: GeneratorOptions): HostileRequest {
  const r = rngFor(seed, index);
  if (r.chance(0.3)) return { index, ...rawKind(r, opts) };
  const [path, shared] = base(r, opts.model);
  // The bases share constant subtrees (schemas, tools): mutate a copy, never them.
  const body = structuredClone(shared);
  const labels: string[] = [];
  // A quarter go out unmutated: valid work batched alongside the hostile requests.
  const n = r.int(4);
  for (let i = 0; i < n; i++) labels.push(mutate(r, body, opts));
  let text = bodyText(body);
  if (Buffer.byteLength(text) > opts.maxBodyBytes) text = text.slice(0, Math.floor(opts.maxBodyBytes / 4));
  const kind = `${path === PATHS[0] ? 'chat' : 'completions'}${labels.length > 0 ? `+${labels.join('+')}` : '(valid)'}`;
  return { index, kind, bytes: request('POST', path, JSON_TYPE, text), delivery: 'send' };
}
