// A small Hugging Face hub client on undici's fetch: model info, file listing and file bodies,
// with bounded timeouts, retries with backoff, manual redirects (the token never leaves the hub's
// origin) and errors that say what to do. In offline mode it refuses before any socket opens.
// Requests go through HTTP(S)_PROXY unless NO_PROXY names the host (Node's global fetch ignores them).
import { fetch, type Headers, type Response } from 'undici';
import { proxyDispatcher } from '../net/dispatchers.js';
import { HubError, OfflineError } from './errors.js';
import { hubEnv, type HubEnv } from './hub-env.js';

export interface HubClientOptions {
  hub?: HubEnv;
  timeoutMs?: number; // until response headers arrive (default 30 s)
  idleTimeoutMs?: number; // longest pause between body chunks (default 60 s)
  retries?: number; // attempts after the first for network errors, 429 and 5xx (default 4)
  retryBaseMs?: number; // first backoff delay, doubled each attempt (default 500 ms)
  onRetry?: (info: RetryInfo) => void;
}

export interface RetryInfo {
  what: string;
  attempt: number; // 1-based retry number
  delayMs: number;
  reason: string;
}

export interface RepoSibling {
  name: string;
  size?: number;
  blobId?: string; // git blob sha1 (the ETag of a non-LFS file)
  sha256?: string; // LFS object id (the ETag of an LFS file)
}

export interface RepoInfo {
  repo: string; // canonical id as the hub spells it
  commit: string;
  private?: boolean;
  gated?: boolean | string;
  siblings: RepoSibling[];
}

export interface OpenedFile {
  response: Response;
  etag?: string; // the hub's ETag for the file (X-Linked-Etag for LFS redirects), unquoted
  commit?: string;
  /** Call after each chunk: re-arms the idle timer. */
  touch: () => void;
  /** Stops the timers and the request. */
  close: () => void;
}

/** An error worth retrying: network failure, timeout, 429 or 5xx. */
export class RetryableError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

const MAX_REDIRECTS = 5;

export function normalizeEtag(v: string | null): string | undefined {
  if (!v) return undefined;
  return v.replace(/^W\//, '').replace(/^"|"$/g, '');
}

function encodePath(p: string): string {
  return p.split('/').map(encodeURIComponent).join('/');
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function networkReason(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (e?.name === 'AbortError' || e?.name === 'TimeoutError') return e.message || 'timed out';
  const code = e?.cause?.code;
  return code ? `${e.message} (${code})` : (e?.cause?.message ?? e?.message ?? String(err));
}

export class HubClient {
  readonly hub: HubEnv;
  private readonly timeoutMs: number;
  readonly idleTimeoutMs: number;
  private readonly retries: number;
  private readonly retryBaseMs: number;
  private readonly onRetry?: (info: RetryInfo) => void;

  constructor(opts: HubClientOptions = {}) {
    this.hub = opts.hub ?? hubEnv();
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? 60_000;
    this.retries = opts.retries ?? 4;
    this.retryBaseMs = opts.retryBaseMs ?? 500;
    this.onRetry = opts.onRetry;
  }

  private assertOnline(what: string): void {
    if (this.hub.offline) throw new OfflineError(`HF_HUB_OFFLINE is set: not contacting ${this.hub.endpoint} for ${what}`);
  }

  /** Runs `fn` and retries RetryableErrors with exponential backoff and jitter. */
  async withRetries<T>(what: string, fn: (attempt: number) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn(attempt);
      } catch (err) {
        if (!(err instanceof RetryableError) || attempt >= this.retries) {
          if (err instanceof RetryableError) {
            const resume = what.startsWith('download') ? '; the download resumes where it stopped' : '';
            throw new HubError(`${what} failed after ${attempt + 1} attempt${attempt ? 's' : ''}: ${err.message}. Check the network (or HF_ENDPOINT=${this.hub.endpoint}) and run the command again${resume}`);
          }
          throw err;
        }
        const backoff = Math.min(30_000, this.retryBaseMs * 2 ** attempt) * (0.8 + 0.4 * Math.random());
        const delayMs = Math.round(err.retryAfterMs !== undefined ? Math.min(60_000, Math.max(err.retryAfterMs, backoff)) : backoff);
        this.onRetry?.({ what, attempt: attempt + 1, delayMs, reason: err.message });
        await sleep(delayMs);
      }
    }
  }

  private headers(url: URL, extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { 'user-agent': 'rapid (+https://github.com/rapid-vlm)', ...extra };
    // The token goes to the hub only: a redirect to a CDN or another host never carries it.
    if (this.hub.token && url.origin === new URL(this.hub.endpoint).origin) h.authorization = `Bearer ${this.hub.token}`;
    return h;
  }

  /**
   * One request with manual redirects and a header timeout. Returns the final response and the
   * first hub response's headers (where X-Linked-Etag / X-Repo-Commit live).
   */
  private async request(
    path: string,
    what: string,
    extraHeaders: Record<string, string> = {},
  ): Promise<{ res: Response; first: Headers; controller: AbortController; timer: { t?: NodeJS.Timeout } }> {
    this.assertOnline(what);
    const controller = new AbortController();
    const timer: { t?: NodeJS.Timeout } = {};
    const arm = (ms: number, why: string) => {
      clearTimeout(timer.t);
      timer.t = setTimeout(() => controller.abort(new RetryableError(why)), ms);
    };
    let url = new URL(this.hub.endpoint + path);
    let first: Headers | undefined;
    try {
      for (let hop = 0; ; hop++) {
        arm(this.timeoutMs, `no response from ${url.host} within ${Math.round(this.timeoutMs / 1000)} s`);
        let res: Response;
        try {
          res = await fetch(url, { headers: this.headers(url, extraHeaders), redirect: 'manual', signal: controller.signal, dispatcher: proxyDispatcher(this.hub.proxy) });
        } catch (err) {
          const reason = controller.signal.reason instanceof RetryableError ? controller.signal.reason.message : networkReason(err);
          throw new RetryableError(`${url.host}: ${reason}`);
        }
        first ??= res.headers;
        if (res.status >= 300 && res.status < 400 && res.headers.has('location')) {
          await res.body?.cancel();
          if (hop >= MAX_REDIRECTS) throw new HubError(`${what}: more than ${MAX_REDIRECTS} redirects`);
          url = new URL(res.headers.get('location') as string, url);
          continue;
        }
        if (res.status === 429 || res.status >= 500) {
          await res.body?.cancel();
          const ra = Number(res.headers.get('retry-after'));
          throw new RetryableError(`${url.host} answered HTTP ${res.status}`, Number.isFinite(ra) && ra > 0 ? ra * 1000 : undefined);
        }
        arm(this.idleTimeoutMs, `${url.host} stopped sending for ${Math.round(this.idleTimeoutMs / 1000)} s`);
        return { res, first, controller, timer };
      }
    } catch (err) {
      clearTimeout(timer.t);
      throw err;
    }
  }

  /** Maps a 4xx to an error that names the cause and the fix. */
  private async failure(res: Response, repo: string, what: string, revision?: string): Promise<HubError> {
    const code = res.headers.get('x-error-code') ?? undefined;
    const serverMsg = res.headers.get('x-error-message') ?? (await res.text().catch(() => '')).slice(0, 200);
    const page = `${this.hub.endpoint}/${repo}`;
    let msg: string;
    if (res.status === 401) {
      msg = this.hub.token
        ? `${repo}: the hub rejected the token in HF_TOKEN (401): it is invalid, expired, or has no access to this repo`
        : `${repo} needs authentication (401): it is private or gated, or does not exist. Set HF_TOKEN to an access token (${this.hub.endpoint}/settings/tokens) of an account that can read it`;
    } else if (res.status === 403) {
      msg =
        code === 'GatedRepo' || /gated/i.test(serverMsg)
          ? `${repo} is gated: accept its terms at ${page} with the account whose token is in HF_TOKEN`
          : `${repo}: access forbidden (403)${serverMsg ? `: ${serverMsg}` : ''}`;
    } else if (res.status === 404) {
      if (code === 'RevisionNotFound') msg = `${repo} has no revision "${revision}"`;
      else if (code === 'EntryNotFound') msg = `${what}: not found in ${repo}`;
      else msg = `${repo} not found on ${this.hub.endpoint} (check the spelling; a private repo needs HF_TOKEN)`;
    } else {
      msg = `${what}: HTTP ${res.status}${serverMsg ? `: ${serverMsg}` : ''}`;
    }
    return new HubError(msg, res.status, code);
  }

  private async getJson<T>(path: string, repo: string, what: string, revision?: string): Promise<T> {
    return this.withRetries(what, async () => {
      const { res, timer } = await this.request(path, what, { accept: 'application/json' });
      try {
        if (!res.ok) throw await this.failure(res, repo, what, revision);
        try {
          return (await res.json()) as T;
        } catch (err) {
          throw new RetryableError(`${what}: truncated or invalid JSON (${(err as Error).message})`);
        }
      } finally {
        clearTimeout(timer.t);
      }
    });
  }

  /** GET /api/models/{repo}/revision/{rev}?blobs=true: the commit and every file with size and hashes. */
  async repoInfo(repo: string, revision = 'main'): Promise<RepoInfo> {
    interface Raw {
      id?: string;
      sha?: string;
      private?: boolean;
      gated?: boolean | string;
      siblings?: { rfilename: string; size?: number; blobId?: string; lfs?: { sha256?: string; size?: number } }[];
    }
    const raw = await this.getJson<Raw>(
      `/api/models/${encodePath(repo)}/revision/${encodeURIComponent(revision)}?blobs=true`,
      repo,
      `model info for ${repo}@${revision}`,
      revision,
    );
    if (!raw.sha || !Array.isArray(raw.siblings)) throw new HubError(`${this.hub.endpoint} returned model info for ${repo} without a commit or a file list`);
    return {
      repo: raw.id ?? repo,
      commit: raw.sha,
      private: raw.private,
      gated: raw.gated,
      siblings: raw.siblings.map((s) => ({ name: s.rfilename, size: s.lfs?.size ?? s.size, blobId: s.blobId, sha256: s.lfs?.sha256 })),
    };
  }

  /** GET /api/models/{repo}/tree/{rev}: top-level files with oid, size and lfs sha256. */
  async listTree(repo: string, revision: string): Promise<RepoSibling[]> {
    interface Raw {
      type: string;
      path: string;
      oid?: string;
      size?: number;
      lfs?: { oid?: string; sha256?: string; size?: number };
    }
    const raw = await this.getJson<Raw[]>(`/api/models/${encodePath(repo)}/tree/${encodeURIComponent(revision)}`, repo, `file list of ${repo}@${revision}`, revision);
    return raw
      .filter((e) => e.type === 'file')
      .map((e) => ({ name: e.path, size: e.lfs?.size ?? e.size, blobId: e.oid, sha256: e.lfs?.oid ?? e.lfs?.sha256 }));
  }

  /** GET /{repo}/resolve/{commit}/{file}, following redirects, from byte `start` when > 0. */
  async openFile(repo: string, commit: string, file: string, start = 0): Promise<OpenedFile> {
    const what = `${repo}/${file}`;
    const { res, first, controller, timer } = await this.request(
      `/${encodePath(repo)}/resolve/${encodeURIComponent(commit)}/${encodePath(file)}`,
      what,
      start > 0 ? { range: `bytes=${start}-` } : {},
    );
    if (!res.ok && res.status !== 416) {
      clearTimeout(timer.t);
      throw await this.failure(res, repo, what);
    }
    const touch = () => {
      clearTimeout(timer.t);
      timer.t = setTimeout(() => controller.abort(new RetryableError(`download of ${file} stalled for ${Math.round(this.idleTimeoutMs / 1000)} s`)), this.idleTimeoutMs);
    };
    return {
      response: res,
      etag: normalizeEtag(first.get('x-linked-etag') ?? first.get('etag')),
      commit: first.get('x-repo-commit') ?? undefined,
      touch,
      close: () => {
        clearTimeout(timer.t);
        if (!controller.signal.aborted) controller.abort();
      },
    };
  }
}
