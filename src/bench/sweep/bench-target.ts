// What bench talks to: a model it serves itself (a rapid server on an ephemeral loopback port,
// closed when the sweep ends) or --url, any OpenAI-compatible server. Requests go only there,
// over one pooled undici agent per run, sized to the highest concurrency (no queueing in the client).
import { basename, resolve } from 'node:path';
import { fetch, type Agent } from 'undici';
import { benchAgent } from '../../net/dispatchers.js';
import { chatCompletionsUrl, modelsUrl } from './endpoint.js';
import type { StreamTarget } from './stream-request.js';
import type { KvCacheDtype, NativeDevice } from '../../native/types.js';
import type { SpeculativeMode } from '../../engine/speculative/speculator.js';

export interface InProcessOptions {
  threads?: number;
  precision?: 'exact' | 'fast';
  device?: NativeDevice;
  maxNumSeqs: number;
  /** Connections of the client pool. */
  connections: number;
  kvCacheMemory?: number;
  kvCacheDtype?: KvCacheDtype;
  speculative?: SpeculativeMode;
  log?: (line: string) => void;
}

export interface OpenTarget {
  target: StreamTarget;
  /** The model directory when served in-process. */
  inProcessModel: string | null;
  close(): Promise<void>;
}

/** The first model of GET /v1/models, or undefined when the server does not say (then none is sent). */
export async function discoverModel(endpoint: string, apiKey: string | undefined, timeoutMs: number, dispatcher?: Agent): Promise<string | undefined> {
  try {
    const res = await fetch(modelsUrl(endpoint), { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(Math.min(timeoutMs, 10_000)), dispatcher });
    if (!res.ok) return undefined;
    const body = (await res.json()) as { data?: { id?: unknown }[] };
    const id = body.data?.[0]?.id;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

export async function openUrlTarget(url: string, model: string | undefined, apiKey: string | undefined, timeoutMs: number, connections: number): Promise<OpenTarget> {
  const endpoint = chatCompletionsUrl(url);
  const dispatcher = benchAgent(connections);
  return {
    target: { endpoint, model: model ?? (await discoverModel(endpoint, apiKey, timeoutMs, dispatcher)), apiKey, dispatcher },
    inProcessModel: null,
    close: () => dispatcher.destroy(),
  };
}

export async function openInProcessTarget(spec: string, o: InProcessOptions): Promise<OpenTarget> {
  // Loaded lazily: a --url bench never touches the native addon.
  const { startServer } = await import('../../app/start-server.js');
  const { resolveModelDetailed } = await import('../../models/resolve-model.js');
  const { createProgressPrinter } = await import('../../models/progress-printer.js');
  const resolved = await resolveModelDetailed(spec, { pull: true, onProgress: createProgressPrinter(process.stderr) });
  const name = resolved.source === 'local' ? basename(resolve(resolved.dir)) : spec;
  const running = await startServer(
    resolved.dir,
    {
      host: '127.0.0.1',
      port: 0,
      servedModelName: name,
      threads: o.threads,
      precision: o.precision ?? 'fast',
      device: o.device,
      maxNumSeqs: o.maxNumSeqs,
      maxWaiting: Math.max(256, o.maxNumSeqs * 4),
      kvCacheMemory: o.kvCacheMemory,
      kvCacheDtype: o.kvCacheDtype,
      ...(o.speculative !== undefined ? { speculative: o.speculative } : {}),
      recommended: resolved.entry?.sampling,
    },
    o.log,
  );
  const dispatcher = benchAgent(o.connections);
  return {
    target: { endpoint: chatCompletionsUrl(running.url), model: name, dispatcher },
    inProcessModel: resolved.dir,
    close: async () => {
      await dispatcher.destroy();
      await running.close(2_000);
    },
  };
}
