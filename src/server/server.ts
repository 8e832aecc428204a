// The OpenAI-compatible HTTP server over node:http: routing, API key, body limits, JSON errors,
// and graceful shutdown. Compute is the engine's; the server never loads the native binding.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EngineLike } from '../engine/engine.js';
import { handleGeneration, type CompletionContext } from './completions.js';
import { HttpError, badRequest, notFound, toHttpError } from './http-errors.js';
import { ServerMetrics } from './metrics.js';
import type { ServedModel } from './served-model.js';
import { requestPolicy } from './request-policy.js';
import type { GrammarProvider } from '../engine/grammar/grammar-service.js';
import { parseChatRequest, parseCompletionRequest } from './validate.js';
import { detokenize, tokenize } from './tokenize.js';
import { loadRequestImages } from './images.js';
import { createMessagesRoute } from './anthropic/messages-route.js';
import { anthropicErrorBody, isMessagesPath } from './anthropic/messages-errors.js';
import { jsonShapeProblem } from './json-shape.js';
import { REQUEST_LIMITS } from './request-limits.js';
import { embeddingModelRefusal, embeddingsDisabled, handleEmbeddings } from './embeddings.js';
import { parseEmbeddingsRequest } from './embeddings-request.js';
import { ConnectionGuard, httpServerOptions, resolveConnectionLimits, type ConnectionLimits } from './connection-limits.js';
import { crossSiteRefusal, type CrossSitePolicy } from './cross-site.js';
import { answerOptions, applyCorsHeaders, resolveCorsPolicy } from './cors.js';
import { requestIdOf } from './request-id.js';
import { noteModel, trackAccess, type AccessEntry, type AccessTracker } from './access-log.js';
import { createResponse, storedResponse, type ResponsesContext } from './responses/route.js';
import { ResponseStore, type ResponseStoreLimits } from './responses/store.js';
import { singleModelRouter, statusOf, type EndpointLease, type ModelRouter, type ServedEndpoint } from './model-routes.js';

/** One model (today's `rapid serve MODEL`), or a router over several (model-pool.ts). */
export type ServedModels = { engine: EngineLike; model: ServedModel; /** Structured output (response_format json_object / json_schema). */ grammar?: GrammarProvider } | { models: ModelRouter };

export type ServerOptions = ServedModels & ServerSettings;

export interface ServerSettings {
  /** When set, every route but /health and /health/ready needs `Authorization: Bearer <key>` (or `x-api-key: <key>`). */
  apiKey?: string;
  /** Largest request body accepted (default 8 MiB); larger ones get 413. */
  maxBodyBytes?: number;
  /** SSE keep-alive comment interval while a stream is quiet (default 10 s; 0 = off). */
  keepAliveMs?: number;
  log?: (line: string) => void;
  /** Header/body/keep-alive timeouts and the connection limit (defaults in connection-limits.ts). */
  limits?: Partial<ConnectionLimits>;
  /** Origins whose pages may call the server ("*": any); default none, or any with apiKey (cors.ts). */
  corsOrigins?: readonly string[];
  /** A keyless server refuses POSTs without a JSON content type (curl -d's form type included). */
  requireJsonContentType?: boolean;
  /** Bounds of the in-memory store behind previous_response_id (defaults in responses/store.ts). */
  responseStore?: Partial<ResponseStoreLimits>;
  /** --strict-requests: fields OpenAI does not define are a 400 (default: accepted and logged once). */
  strictRequests?: boolean;
  /** One entry per request when its response closes (access-log.ts; probes only when they fail). */
  accessLog?: (entry: AccessEntry) => void;
}

export interface RapidServer {
  readonly http: Server;
  readonly metrics: ServerMetrics;
  listen(port: number, host?: string): Promise<{ host: string; port: number; url: string }>;
  /** /health/ready answers 503 from now on while requests are still served: load balancers stop sending first. */
  markUnready(): void;
  /** Stops accepting, lets in-flight requests finish for up to graceMs (then fails them), closes. */
  close(graceMs?: number): Promise<void>;
}

/** Bodies above this are not even read to the end: the connection is dropped. */
const HARD_BODY_LIMIT = 256 * 1024 * 1024;

const ROUTES: Record<string, string[]> = {
  '/health': ['GET'],
  '/health/ready': ['GET'],
  '/v1/models': ['GET'],
  '/v1/embeddings': ['POST'],
  '/v1/status': ['GET'],
  '/metrics': ['GET'],
  '/v1/chat/completions': ['POST'],
  '/v1/completions': ['POST'],
  '/v1/responses': ['POST'],
  '/tokenize': ['POST'],
  '/detokenize': ['POST'],
  '/v1/messages': ['POST'],
  '/v1/messages/count_tokens': ['POST'],
};

/** The routes that generate text (refused by an embedding model). */
const GENERATION_ROUTES = new Set(['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/messages']);

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) {
    if (!res.writableEnded) res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

const invalidUrl = (url: string) => badRequest(`the request URL is not valid: ${JSON.stringify(url.slice(0, 200))}`, null, 'invalid_url');

/** The route path of a request target (trailing slashes dropped); null when it does not parse. */
function routePath(url: string): string | null {
  try {
    return new URL(url, 'http://localhost').pathname.replace(/\/+$/, '') || '/';
  } catch {
    return null;
  }
}

function decodePath(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw invalidUrl(segment);
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/**
 * Reads the whole body; past the limit it keeps draining (so the client sees the 413) but keeps
 * nothing. A body that goes quiet for bodyIdleTimeoutMs, or is not all in after bodyTimeoutMs, is a 408.
 */
function readBody(req: IncomingMessage, limit: number, l: ConnectionLimits): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? NaN);
    const chunks: Buffer[] = [];
    let size = 0;
    const tooLarge = () => new HttpError(413, `the request body is larger than ${limit} bytes`, 'invalid_request_error', null, 'request_too_large');
    if (declared > HARD_BODY_LIMIT) {
      reject(tooLarge());
      return;
    }
    const timedOut = (why: () => string) => () => {
      reject(new HttpError(408, `the request body ${why()} (${size} bytes received); send the whole body promptly`, 'invalid_request_error', null, 'body_timeout'));
      req.pause();
    };
    const stalled = timedOut(() => `stalled: no bytes for ${l.bodyIdleTimeoutMs} ms`);
    const total = setTimeout(timedOut(() => `was not complete after ${l.bodyTimeoutMs} ms`), l.bodyTimeoutMs);
    let idle = setTimeout(stalled, l.bodyIdleTimeoutMs);
    const settle = () => (clearTimeout(total), clearTimeout(idle));
    req.on('data', (c: Buffer) => {
      clearTimeout(idle);
      idle = setTimeout(stalled, l.bodyIdleTimeoutMs);
      size += c.length;
      if (size <= limit) chunks.push(c);
      else if (size > HARD_BODY_LIMIT) req.destroy();
    });
    req.on('end', () => (settle(), size > limit ? reject(tooLarge()) : resolve(Buffer.concat(chunks))));
    req.on('error', (err) => (settle(), reject(err)));
    req.on('close', () => {
      settle();
      if (!req.complete) reject(size > limit ? tooLarge() : new HttpError(400, 'the request body was cut off', 'invalid_request_error', null, 'incomplete_body'));
    });
  });
}

/** Parses the body as JSON whatever its Content-Type (curl -d sends form-urlencoded by default; cross-site.ts
 * decides who may). Its shape is checked first, without recursion or parsing (json-shape.ts). */
async function readJson(req: IncomingMessage, limit: number, l: ConnectionLimits, maxJsonValues: number): Promise<unknown> {
  const body = await readBody(req, limit, l);
  const { maxJsonDepth, maxJsonObjects } = REQUEST_LIMITS;
  const shape = jsonShapeProblem(body, { maxDepth: maxJsonDepth, maxObjects: maxJsonObjects, maxValues: maxJsonValues });
  if (shape?.kind === 'depth') {
    throw badRequest(`the request body nests arrays/objects more than ${maxJsonDepth} deep (at byte ${shape.at}); flatten it (maxJsonDepth = ${maxJsonDepth})`, null, 'json_too_deep');
  }
  if (shape?.kind === 'objects') {
    throw badRequest(`the request body has more than ${maxJsonObjects} JSON objects (at byte ${shape.at}); send fewer messages or parts (maxJsonObjects = ${maxJsonObjects})`, null, 'json_too_large');
  }
  if (shape?.kind === 'values') {
    throw badRequest(`the request body has more than ${maxJsonValues} JSON values (array elements and members, at byte ${shape.at}); send fewer (maxJsonValues = ${maxJsonValues})`, null, 'json_too_large');
  }
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw badRequest(`the request body is not valid JSON: ${(err as Error).message}`, null, 'invalid_json');
  }
}

export function createServer(options: ServerOptions): RapidServer {
  const router = 'models' in options ? options.models : singleModelRouter({ engine: options.engine, model: options.model, grammar: options.grammar });
  const maxBody = options.maxBodyBytes ?? 8 * 1024 * 1024;
  // A prompt of token ids has up to a context's worth of values (a pool: of its largest loaded model).
  const jsonValuesLimit = () => Math.max(REQUEST_LIMITS.maxJsonValues, 2 * router.contextLength());
  const limits = resolveConnectionLimits(options.limits);
  const keyDigest = options.apiKey ? digest(options.apiKey) : null;
  const cors = resolveCorsPolicy(options.corsOrigins, keyDigest !== null);
  const crossSite: CrossSitePolicy = { cors, requireJsonContentType: options.requireJsonContentType ?? true };
  const metrics = new ServerMetrics();
  const log = options.log ?? (() => undefined);
  const startedAt = Date.now();
  let closing = false;
  let unready = false;

  const policy = requestPolicy({ strict: options.strictRequests, log });
  const keepAliveMs = options.keepAliveMs ?? 10_000;
  const store = new ResponseStore(options.responseStore);
  // Each model's route contexts, built once per loaded engine.
  const contexts = new WeakMap<ServedEndpoint, ReturnType<typeof contextsFor>>();
  const contextsFor = ({ engine, model, grammar }: ServedEndpoint) => {
    const ctx: CompletionContext = { engine, model, keepAliveMs, metrics: metrics.forModel(model.id), sendJson, grammar };
    const responses: ResponsesContext = { deps: { engine, metrics: ctx.metrics, grammar }, model, keepAliveMs, store, policy, sendJson };
    return { engine, model, ctx, responses, messages: createMessagesRoute({ ...ctx, policy }) };
  };
  /** The model a request body names, held until its response closes (a pool may load it first). */
  const acquire = async (body: unknown, res: ServerResponse) => {
    const name = typeof body === 'object' && body !== null && typeof (body as { model?: unknown }).model === 'string' ? (body as { model: string }).model : undefined;
    const lease: EndpointLease = await router.acquire(name);
    noteModel(lease.endpoint.model.id);
    if (res.writableFinished || res.destroyed) lease.release();
    else res.once('close', () => lease.release());
    let c = contexts.get(lease.endpoint);
    if (!c) contexts.set(lease.endpoint, (c = contextsFor(lease.endpoint)));
    return c;
  };
  const responsesCtx: Pick<ResponsesContext, 'store' | 'sendJson'> = { store, sendJson };

  // Anthropic's clients send the key as x-api-key.
  const authorized = (req: IncomingMessage): boolean => {
    if (!keyDigest) return true;
    const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const xKey = req.headers['x-api-key'];
    const key = bearer ?? (typeof xKey === 'string' ? xKey : undefined);
    return key !== undefined && timingSafeEqual(digest(key.trim()), keyDigest);
  };

  async function route(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const method = req.method ?? 'GET';
    // Preflights carry no credentials: they are answered before the key is checked.
    if (method === 'OPTIONS') {
      const admin = /^\/v1\/models\/.+\/(load|unload)$/.test(path);
      const methods = ROUTES[path] ?? (admin ? ['POST'] : path.startsWith('/v1/models/') ? ['GET'] : path.startsWith('/v1/responses/') ? ['GET', 'DELETE'] : null);
      if (!methods) throw notFound(`no route ${path}`);
      answerOptions(req, res, cors, methods);
      return;
    }
    if (path === '/health' && method === 'GET') {
      const h = router.health();
      // A grammar engine being rebuilt still serves (requests wait for it): 200, but said.
      const g = router.loaded().map((l) => l.endpoint.grammar?.health?.()).find((x) => x?.status === 'degraded');
      if (h.ok && g?.status === 'degraded') sendJson(res, 200, { status: 'degraded', serving: true, component: 'grammar', reason: g.reason });
      else sendJson(res, h.ok ? 200 : 503, h.ok ? { status: 'ok' } : { status: 'unhealthy', reason: h.reason });
      return;
    }
    if (path === '/health/ready' && method === 'GET') {
      const r = closing || unready ? { ok: false, reason: 'shutting down' } : router.ready();
      sendJson(res, r.ok ? 200 : 503, r.ok ? { status: 'ready' } : { status: 'not_ready', reason: r.reason });
      return;
    }
    if (!authorized(req)) {
      throw new HttpError(401, 'Incorrect or missing API key: send Authorization: Bearer <key> (or x-api-key: <key>)', 'invalid_request_error', null, 'invalid_api_key', {
        'www-authenticate': 'Bearer',
      });
    }
    if (path.startsWith('/v1/models/') && method === 'GET') {
      sendJson(res, 200, router.card(decodePath(path.slice('/v1/models/'.length))));
      return;
    }
    const admin = method === 'POST' ? /^\/v1\/models\/(.+)\/(load|unload)$/.exec(path) : null;
    if (admin) {
      if (!router.admin) throw notFound(`no route ${method} ${path}: loading and unloading need several models (rapid serve A B, or --models-config)`);
      if (!keyDigest) {
        const refusal = crossSiteRefusal(req, { ...crossSite, requireJsonContentType: false });
        if (refusal) throw refusal;
      }
      const body = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] ? await readJson(req, maxBody, limits, REQUEST_LIMITS.maxJsonValues) : undefined;
      if (closing) throw new HttpError(503, 'the server is shutting down', 'server_error', null, 'shutting_down', { 'retry-after': '5' });
      sendJson(res, 200, await router.admin(admin[2] as 'load' | 'unload', decodePath(admin[1]!), body));
      return;
    }
    if (path.startsWith('/v1/responses/')) {
      // DELETE has no body (so no JSON type to require); a foreign Origin is still refused.
      const refusal = keyDigest ? null : crossSiteRefusal(req, { ...crossSite, requireJsonContentType: false });
      if (refusal) throw refusal;
      storedResponse(responsesCtx, res, method, decodePath(path.slice('/v1/responses/'.length)));
      return;
    }
    const allowed = ROUTES[path];
    if (!allowed) throw notFound(`no route ${method} ${path}`);
    if (!allowed.includes(method)) {
      throw new HttpError(405, `${path} accepts ${allowed.join(', ')}`, 'invalid_request_error', null, 'method_not_allowed', { allow: allowed.join(', ') });
    }
    // Only a route that exists, with its method, can be made to act by a web page.
    if (!keyDigest) {
      const refusal = crossSiteRefusal(req, crossSite);
      if (refusal) throw refusal;
    }
    // An embedding model has no language-model head: every generating route refuses it up front.
    const refusal = (m: ServedModel) => (GENERATION_ROUTES.has(path) ? embeddingModelRefusal(m, path) : null);
    const fixed = 'models' in options ? null : options.model;
    if (fixed && refusal(fixed)) throw refusal(fixed);
    /** The body, then the model it names (refused if it cannot serve this route). */
    const bodyAndModel = async () => {
      const body = await readJson(req, maxBody, limits, jsonValuesLimit());
      if (closing) throw new HttpError(503, 'the server is shutting down', 'server_error', null, 'shutting_down', { 'retry-after': '5' });
      const c = await acquire(body, res);
      const r = refusal(c.model);
      if (r) throw r;
      return { body, c };
    };
    switch (path) {
      case '/v1/models':
        sendJson(res, 200, { object: 'list', data: router.cards() });
        return;
      case '/v1/status': {
        const loaded = router.loaded();
        const one = 'models' in options ? null : loaded[0]!.endpoint;
        const uptime = { uptime_seconds: Math.round((Date.now() - startedAt) / 1000), closing };
        if (one) sendJson(res, 200, { model: one.model.id, ...(one.model.device ? { device: one.model.device } : {}), ...uptime, ...one.engine.stats() });
        else sendJson(res, 200, { ...uptime, models: router.cards(), engines: statusOf(router) });
        return;
      }
      case '/v1/embeddings': {
        if (fixed && !fixed.embeddings) throw embeddingsDisabled(fixed);
        const { body, c } = await bodyAndModel();
        if (!c.model.embeddings) throw embeddingsDisabled(c.model);
        await handleEmbeddings(c.engine, c.model, c.model.embeddings.size, res, await parseEmbeddingsRequest(body, c.model, c.model.embeddings), sendJson);
        return;
      }
      case '/metrics': {
        const text = metrics.render(router.loaded().map((l) => ({ stats: l.endpoint.engine.stats(), modelId: l.label, kvCacheDtype: l.endpoint.model.kvCacheDtype })));
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'content-length': Buffer.byteLength(text) });
        res.end(text);
        return;
      }
      case '/tokenize':
      case '/detokenize': {
        const body = await readJson(req, maxBody, limits, jsonValuesLimit());
        const { model } = await acquire(body, res);
        sendJson(res, 200, path === '/tokenize' ? await tokenize(body, model) : detokenize(body, model));
        return;
      }
      case '/v1/chat/completions':
      case '/v1/completions': {
        const { body, c } = await bodyAndModel();
        // Images are fetched/decoded first (async); a bad one is a 400 before anything is queued.
        const g =
          path === '/v1/chat/completions' ? await parseChatRequest(body, c.model, await loadRequestImages(body, c.model), policy) : await parseCompletionRequest(body, c.model, policy);
        await handleGeneration(c.ctx, res, g);
        return;
      }
      case '/v1/responses': {
        const { body, c } = await bodyAndModel();
        await createResponse(c.responses, res, body);
        return;
      }
      case '/v1/messages':
      case '/v1/messages/count_tokens': {
        const { body, c } = await bodyAndModel();
        await (path === '/v1/messages' ? c.messages.create(res, body) : c.messages.countTokens(res, body));
        return;
      }
    }
  }

  const http = createHttpServer(httpServerOptions(limits), (req, res) => {
    // Set before anything is written, so every answer below carries them (writeHead merges).
    const requestId = requestIdOf(req);
    res.setHeader('x-request-id', requestId);
    const access: AccessTracker | null = options.accessLog ? trackAccess(req, res, requestId, router.loaded()[0]?.endpoint.model.id ?? '-', options.accessLog) : null;
    applyCorsHeaders(req, res, cors);
    guard.responding(req.socket, (done) => res.once('close', done));
    if (guard.isOverLimit(req.socket)) {
      const e = new HttpError(503, `the server is at its limit of ${limits.maxConnections} connections; retry shortly`, 'server_error', null, 'too_many_connections', { 'retry-after': '1' });
      metrics.countHttp('other', 503);
      sendJson(res, 503, e.body(), { ...e.headers, connection: 'close' });
      return;
    }
    const path = routePath(req.url ?? '/');
    if (path === null) {
      metrics.countHttp('other', 400);
      sendJson(res, 400, invalidUrl(req.url ?? '').body(), req.complete ? {} : { connection: 'close' });
      return;
    }
    const admin = /^\/v1\/models\/.+\/(load|unload)$/.exec(path);
    const label = ROUTES[path] ? path : admin ? `/v1/models/:id/${admin[1]}` : path.startsWith('/v1/models/') ? '/v1/models/:id' : path.startsWith('/v1/responses/') ? '/v1/responses/:id' : 'other';
    res.on('finish', () => metrics.countHttp(label, res.statusCode));
    access?.setRoute(label);
    (access ? access.run(() => route(req, res, path)) : route(req, res, path)).catch((err: unknown) => {
      const e = toHttpError(err);
      if (e.status >= 500 && !(err instanceof HttpError)) log(`${req.method} ${path} [${requestId}]: ${(err as Error)?.stack ?? String(err)}`);
      // An answer before the body is all in (413, 408, a refusal) leaves it unread: close rather than reuse the socket.
      // Each API's routes answer in its own error shape.
      const body = isMessagesPath(path) ? anthropicErrorBody(e) : e.body();
      sendJson(res, e.status, body, e.status === 413 || !req.complete ? { ...e.headers, connection: 'close' } : { ...e.headers });
    });
  });
  const guard = new ConnectionGuard(http, limits);

  return {
    http,
    metrics,
    listen(port, host = '127.0.0.1') {
      return new Promise((resolve, reject) => {
        http.once('error', reject);
        http.listen(port, host, () => {
          http.off('error', reject);
          const a = http.address() as AddressInfo;
          const shownHost = a.family === 'IPv6' ? `[${a.address}]` : a.address;
          resolve({ host: a.address, port: a.port, url: `http://${shownHost}:${a.port}` });
        });
      });
    },
    markUnready() {
      unready = true;
    },
    async close(graceMs = 10_000) {
      if (closing) return;
      closing = true;
      const closed = new Promise<void>((resolve) => http.close(() => resolve()));
      http.closeIdleConnections();
      await router.shutdown(graceMs);
      // Give the last responses a moment to flush, then drop whatever is left.
      await new Promise((r) => setTimeout(r, 50));
      http.closeAllConnections();
      guard.stop();
      await closed;
    },
  };
}
