// Every outbound HTTP request's undici dispatcher is made here, so the proxy and pooling rules
// live in one place: downloads and chat follow the proxy variables, bench and image fetches do not.
import type { LookupFunction } from 'node:net';
import { Agent, EnvHttpProxyAgent, type Dispatcher } from 'undici';

/** The proxy variables, read as curl reads them (lower case first); '' means none. */
export interface ProxyEnv {
  httpProxy: string;
  httpsProxy: string;
  noProxy: string;
}

export function proxyEnv(env: Record<string, string | undefined> = process.env): ProxyEnv {
  return {
    httpProxy: env.http_proxy || env.HTTP_PROXY || '',
    // Like curl: without HTTPS_PROXY, https:// targets use HTTP_PROXY.
    httpsProxy: env.https_proxy || env.HTTPS_PROXY || env.http_proxy || env.HTTP_PROXY || '',
    noProxy: env.no_proxy || env.NO_PROXY || '',
  };
}

const proxied = new Map<string, Dispatcher>();

/**
 * Hub downloads and chat --url: HTTP(S)_PROXY / NO_PROXY from `p` (the process env by default).
 * One agent per distinct setting, kept for the process: its connections are reused across requests.
 */
export function proxyDispatcher(p: ProxyEnv = proxyEnv()): Dispatcher {
  const key = `${p.httpProxy}\n${p.httpsProxy}\n${p.noProxy}`;
  let d = proxied.get(key);
  if (d === undefined) {
    // Explicit '' values: undici would otherwise fall back to process.env itself.
    d = new EnvHttpProxyAgent({ httpProxy: p.httpProxy, httpsProxy: p.httpsProxy, noProxy: p.noProxy });
    proxied.set(key, d);
  }
  return d;
}

/** Bench's client: a pool sized to the concurrency, straight to the server (a proxy would be measured too). */
export function benchAgent(connections: number): Agent {
  return new Agent({ connections: Math.max(1, connections), pipelining: 1, keepAliveTimeout: 10_000, bodyTimeout: 0, headersTimeout: 0 });
}

/**
 * Remote images on the server: direct, never proxied (the SSRF check needs the socket to connect to
 * the address it checked), with `lookup` deciding which addresses may be reached. One per fetch.
 */
export function pinnedAgent(lookup: LookupFunction): Agent {
  return new Agent({ connect: { lookup }, pipelining: 0 });
}
