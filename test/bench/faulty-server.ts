// A deliberately faulty OpenAI-style streaming server for bench tests. The path prefix picks the
// behaviour (/ok, /drop, /stall, /stall-headers, /500, /badjson, /violate, /empty, /cycle);
// /cycle gives the n-th request the n-th fault in CYCLE order. It records every request it gets.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export const CYCLE = ['ok', 'drop', 'stall', '500', 'badjson', 'violate', 'empty'] as const;
export type Behaviour = (typeof CYCLE)[number] | 'stall-headers' | 'json-once';

export interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
}

export interface FaultyServer {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

export interface FaultyOptions {
  /** Delay before the first token and between tokens, ms. */
  firstTokenMs?: number;
  tokenGapMs?: number;
  tokens?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function sse(res: ServerResponse, obj: unknown): void {
  res.write(`data: ${JSON.stringify(obj)}\n\n`);
}

function delta(content: string | null, finish: string | null = null, role?: string) {
  return { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'faulty', choices: [{ index: 0, delta: { ...(role ? { role } : {}), ...(content !== null ? { content } : {}) }, finish_reason: finish }] };
}

export async function startFaultyServer(o: FaultyOptions = {}): Promise<FaultyServer> {
  const received: Received[] = [];
  const sockets = new Set<Socket>();
  let cycle = 0;
  const first = o.firstTokenMs ?? 5;
  const gap = o.tokenGapMs ?? 2;
  const n = o.tokens ?? 6;

  const http = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method === 'GET' && url.pathname.endsWith('/v1/models')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'faulty-model', object: 'model' }] }));
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
    received.push({ path: url.pathname, headers: req.headers, body });
    let mode = url.pathname.split('/')[1] as Behaviour | 'cycle';
    if (mode === 'cycle') mode = CYCLE[cycle++ % CYCLE.length]!;
    const schema = body.response_format !== undefined;

    if (mode === 'stall-headers') return; // never answers at all
    if (mode === '500') {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'internal failure', type: 'server_error' } }));
      return;
    }
    if (mode === 'json-once') {
      // Ignores stream:true and answers with one JSON reply.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: schema ? '{"name":"a","count":1}' : 'hello there' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 4 } }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    sse(res, delta('', null, 'assistant'));
    if (mode === 'stall') return; // headers and the role chunk, then nothing, forever
    const pieces =
      mode === 'badjson'
        ? ['{"name": ', '"a", ', '"count": ', ']']
        : mode === 'violate'
          ? ['{"name": ', '7, ', '"count": ', '"many"}']
          : mode === 'empty'
            ? []
            : schema
              ? ['{"name": ', '"a", ', '"count": ', '3}']
              : Array.from({ length: n }, (_, i) => `tok${i} `);
    await sleep(first);
    for (let i = 0; i < pieces.length; i++) {
      if (i > 0) await sleep(gap);
      if (res.destroyed) return;
      if (mode === 'drop' && i === 1) {
        // Mid-stream, once this chunk is on the wire: no finish, no [DONE].
        res.write(`data: ${JSON.stringify(delta(pieces[i]!))}\n\n`, () => req.socket.destroy());
        return;
      }
      sse(res, delta(pieces[i]!));
    }
    sse(res, delta(null, 'stop'));
    const so = body.stream_options as { include_usage?: boolean } | undefined;
    if (so?.include_usage) sse(res, { id: 'x', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 5, completion_tokens: pieces.length, total_tokens: 5 + pieces.length } });
    res.write('data: [DONE]\n\n');
    res.end();
  });
  http.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        http.close(() => r());
      }),
  };
}
