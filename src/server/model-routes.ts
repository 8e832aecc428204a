// How the server finds the model a request names: one fixed model (today's `rapid serve MODEL`) or
// a pool of several loaded on demand (model-pool.ts). Routes ask for a lease and give it back when
// the response closes, so a pool never evicts or swaps out an engine that still has requests.
import type { EngineLike, EngineHealth, EngineStats } from '../engine/engine.js';
import type { GrammarProvider } from '../engine/grammar/grammar-service.js';
import { servedNames, type ServedModel } from './served-model.js';
import { notFound } from './http-errors.js';

/** One loaded model as the routes use it. */
export interface ServedEndpoint {
  readonly model: ServedModel;
  readonly engine: EngineLike;
  readonly grammar?: GrammarProvider;
}

export interface EndpointLease {
  readonly endpoint: ServedEndpoint;
  /** Idempotent: the request no longer needs the engine. */
  release(): void;
}

/** /v1/models' entry: OpenAI's fields plus rapid's `status` (a pool's models only). */
export interface ModelCard {
  id: string;
  object: 'model';
  created: number;
  owned_by: 'rapid';
  max_model_len?: number;
  status?: 'loaded' | 'loading' | 'available';
  pinned?: boolean;
}

export interface ModelRouter {
  /** The endpoint a request's `model` names (undefined: the default one), loading it if need be;
   *  404 naming the served models when none matches. */
  acquire(name: string | undefined): Promise<EndpointLease>;
  /** Loaded endpoints with their metrics label, for /health, /v1/status and /metrics. */
  loaded(): { label: string; endpoint: ServedEndpoint }[];
  cards(): ModelCard[];
  /** The card for one name; 404 when it is not served. */
  card(name: string): ModelCard;
  /** The largest context of a served model (bounds the JSON values of a token-id prompt). */
  contextLength(): number;
  /** POST /v1/models/{id}/load and /unload: absent for a single fixed model. */
  admin?(action: 'load' | 'unload', id: string, body: unknown): Promise<unknown>;
  /** The health of the engines as one answer: unhealthy when any loaded one is. */
  health(): EngineHealth;
  ready(): EngineHealth;
  /** Drains and stops every engine (up to graceMs), then their grammar workers. */
  shutdown(graceMs: number): Promise<void>;
}

/** Today's server: one model under its names; name checks stay with the request parsers. */
export function singleModelRouter(endpoint: ServedEndpoint): ModelRouter {
  const { model, engine } = endpoint;
  const card = (id: string): ModelCard => ({ id, object: 'model', created: model.created, owned_by: 'rapid', max_model_len: model.contextLength });
  const lease: EndpointLease = { endpoint, release: () => undefined };
  return {
    acquire: async () => lease,
    loaded: () => [{ label: model.id, endpoint }],
    cards: () => servedNames(model).map(card),
    card(name) {
      if (!(model.acceptAnyName === true || servedNames(model).includes(name))) throw notFound(`The model '${name}' does not exist`, 'model_not_found');
      return card(name);
    },
    contextLength: () => model.contextLength,
    health: () => engine.health(),
    ready: () => engine.ready(),
    async shutdown(graceMs) {
      await engine.shutdown(graceMs);
      await endpoint.grammar?.close?.(); // the grammar worker thread
    },
  };
}

/** The engine stats of every loaded model, for /v1/status. */
export function statusOf(router: ModelRouter): { model: string; stats: EngineStats }[] {
  return router.loaded().map(({ label, endpoint }) => ({ model: label, stats: endpoint.engine.stats() }));
}
