// Resolves an OpenAI image_url to bytes: data: URIs always; http(s) only when the caller allows remote
// images, with a byte limit, an overall timeout, a redirect limit, and every hop's resolved address
// checked before connecting (the socket connects to the address that was checked: no DNS rebinding).

// Never through HTTP(S)_PROXY: a proxy resolves the name itself, so the address check would not hold.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { request } from 'undici';
import { pinnedAgent } from '../net/dispatchers.js';

import { InvalidRequestError } from '../errors/request-errors.js';
import { blockedAddressKind, type IpPolicyOptions } from './ip-policy.js';

export interface FetchImageOptions {
  /** Allow http(s) URLs (the server's --allow-remote-images). Default false: data: URIs only. */
  allowRemote?: boolean;
  /** Largest image accepted, bytes (data: payload after base64 decoding, or HTTP body). Default 20 MiB. */
  maxBytes?: number;
  /** Whole fetch, redirects included. Default 10 s. */
  timeoutMs?: number;
  /** Default 3. */
  maxRedirects?: number;
  /** TEST ONLY: permit loopback addresses (private ranges stay refused). */
  allowLoopback?: boolean;
  /** Request parameter named in errors. Default 'image_url'. */
  param?: string;
}

export const DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024;

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64URL = /^[A-Za-z0-9_-]*={0,2}$/;

function fail(message: string, param: string): InvalidRequestError {
  return new InvalidRequestError(message, param);
}

function mib(n: number): string {
  return n >= 1024 * 1024 ? `${(n / (1024 * 1024)).toFixed(n % (1024 * 1024) === 0 ? 0 : 1)} MiB` : `${n} bytes`;
}

/** data:[<media type>][;base64],<payload> -> bytes (base64 required: images are binary). */
export function decodeDataUri(uri: string, maxBytes: number, param: string): Uint8Array {
  const comma = uri.indexOf(',');
  if (comma < 0) throw fail('malformed data: URI (no comma before the payload)', param);
  const header = uri.slice(5, comma).toLowerCase();
  const params = header.split(';').map((s) => s.trim());
  if (!params.includes('base64')) throw fail('data: URI images must be base64 encoded (data:image/png;base64,...)', param);
  const mediaType = params[0];
  if (mediaType !== '' && !mediaType.startsWith('image/') && mediaType !== 'application/octet-stream') {
    throw fail(`data: URI has media type ${mediaType}, expected image/*`, param);
  }
  const payload = uri.slice(comma + 1).replace(/\s+/g, '');
  // 4 base64 characters carry 3 bytes: refuse by size before decoding anything.
  const estimate = Math.floor((payload.length * 3) / 4);
  if (estimate - 2 > maxBytes) throw fail(`image is larger than the ${mib(maxBytes)} limit`, param);
  if (!BASE64.test(payload) && !BASE64URL.test(payload)) throw fail('data: URI payload is not valid base64', param);
  const bytes = Buffer.from(payload, BASE64.test(payload) ? 'base64' : 'base64url');
  if (bytes.length > maxBytes) throw fail(`image is larger than the ${mib(maxBytes)} limit`, param);
  if (bytes.length === 0) throw fail('data: URI payload is empty', param);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function checkedLookup(policy: IpPolicyOptions): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addresses: LookupAddress[]) => {
      if (err) {
        callback(err, '', 0);
        return;
      }
      // Refuse if any address is non-public: a name that also resolves privately is not trusted.
      for (const a of addresses) {
        const kind = blockedAddressKind(a.address, policy);
        if (kind !== null) {
          const e = new Error(`${hostname} resolves to ${a.address}, a ${kind} address`) as NodeJS.ErrnoException;
          e.code = 'EBLOCKEDADDRESS';
          callback(e, '', 0);
          return;
        }
      }
      if (addresses.length === 0) {
        callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0);
        return;
      }
      const wanted = options.family === 4 || options.family === 6 ? addresses.filter((a) => a.family === options.family) : addresses;
      const list = wanted.length > 0 ? wanted : addresses;
      if (options.all) (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, list);
      else callback(null, list[0].address, list[0].family);
    });
  };
}

interface Hop {
  status: number;
  location?: string;
  body?: Uint8Array;
}

async function requestOnce(url: URL, policy: IpPolicyOptions, maxBytes: number, signal: AbortSignal, param: string): Promise<Hop> {
  // A fresh agent per hop: never reuse a connection made for another host; never proxied.
  const agent = pinnedAgent(checkedLookup(policy));
  try {
    const res = await request(url, { method: 'GET', headers: { accept: 'image/*', 'user-agent': 'rapid-image-fetch' }, signal, dispatcher: agent });
    const status = res.statusCode;
    const header = (name: string) => {
      const v = res.headers[name];
      return Array.isArray(v) ? v[0] : v;
    };
    if (status >= 300 && status < 400) {
      await res.body.dump();
      return { status, location: header('location') };
    }
    if (status < 200 || status >= 300) {
      await res.body.dump();
      throw fail(`fetching the image URL failed: HTTP ${status}`, param);
    }
    const declared = Number(header('content-length'));
    if (Number.isFinite(declared) && declared > maxBytes) {
      res.body.destroy();
      throw fail(`image is larger than the ${mib(maxBytes)} limit (Content-Length ${declared})`, param);
    }
    const chunks: Buffer[] = [];
    let total = 0;
    for await (const chunk of res.body) {
      total += (chunk as Buffer).length;
      if (total > maxBytes) {
        res.body.destroy();
        throw fail(`image is larger than the ${mib(maxBytes)} limit`, param);
      }
      chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks);
    return { status, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) };
  } finally {
    void agent.destroy();
  }
}

function checkUrl(raw: string, base: URL | undefined, policy: IpPolicyOptions, param: string): URL {
  let url: URL;
  try {
    url = new URL(raw, base);
  } catch {
    throw fail(`image URL is not a valid URL: ${raw.slice(0, 100)}`, param);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw fail(`image URL scheme ${url.protocol} is not allowed: use http(s) or a data: URI`, param);
  }
  if (url.username !== '' || url.password !== '') throw fail('image URLs with credentials are not accepted', param);
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isIP(host) !== 0) {
    const kind = blockedAddressKind(host, policy);
    if (kind !== null) throw fail(`image URL points to ${host}, a ${kind} address: only public addresses may be fetched`, param);
  }
  return url;
}

function describeNetError(err: unknown, url: URL, param: string, timeoutMs: number, timedOut: boolean): InvalidRequestError {
  if (err instanceof InvalidRequestError) return err;
  if (timedOut) return fail(`fetching the image URL timed out after ${timeoutMs} ms`, param);
  const e = err as NodeJS.ErrnoException;
  if (e?.code === 'EBLOCKEDADDRESS') return fail(`image URL refused: ${e.message}; only public addresses may be fetched`, param);
  if (e?.code === 'ENOTFOUND' || e?.code === 'EAI_AGAIN') return fail(`image URL host ${url.hostname} could not be resolved`, param);
  return fail(`fetching the image URL failed: ${e?.message ?? String(err)}`, param);
}

/** An OpenAI image_url value (data: URI, or http(s) URL when allowed) -> image bytes. */
export async function fetchImageBytes(source: string, options: FetchImageOptions = {}): Promise<Uint8Array> {
  const param = options.param ?? 'image_url';
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_IMAGE_BYTES;
  if (typeof source !== 'string' || source.length === 0) throw fail('image_url must be a non-empty string', param);
  if (source.slice(0, 5).toLowerCase() === 'data:') return decodeDataUri(source, maxBytes, param);
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(source)?.[1]?.toLowerCase();
  if (scheme !== 'http' && scheme !== 'https') {
    throw fail(
      `image_url must be a data: URI${options.allowRemote ? ' or an http(s) URL' : ''}; ${scheme ? `${scheme}: URLs are` : 'file paths are'} not accepted`,
      param,
    );
  }
  if (!options.allowRemote) {
    throw fail('remote image URLs are disabled on this server: send the image as a data: URI (or start it with --allow-remote-images)', param);
  }
  const policy: IpPolicyOptions = { allowLoopback: options.allowLoopback === true };
  const timeoutMs = options.timeoutMs ?? 10_000;
  const maxRedirects = options.maxRedirects ?? 3;
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, timeoutMs);
  let url = checkUrl(source, undefined, policy, param);
  try {
    for (let hop = 0; ; hop++) {
      let res: Hop;
      try {
        res = await requestOnce(url, policy, maxBytes, controller.signal, param);
      } catch (err) {
        throw describeNetError(err, url, param, timeoutMs, timedOut);
      }
      if (res.body !== undefined) {
        if (res.body.length === 0) throw fail('the image URL returned an empty body', param);
        return res.body;
      }
      if (res.location === undefined) throw fail(`the image URL redirected (HTTP ${res.status}) without a Location`, param);
      if (hop >= maxRedirects) throw fail(`the image URL redirected more than ${maxRedirects} times`, param);
      url = checkUrl(res.location, url, policy, param);
    }
  } finally {
    clearTimeout(timer);
  }
}
