// A local Hugging Face hub that serves model folders from disk (model info, file tree, resolve with
// Range), for `bench:replicas`: full-size replicas up to 16 GB cannot be held in memory the way the
// tests' fake hub holds its files. Files are streamed; LFS hashes are computed once when a repo is added.
import { createHash } from 'node:crypto';
import { createReadStream, readdirSync, statSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

interface HubFile {
  path: string;
  size: number;
  lfs: boolean;
  hash: string; // sha256 for LFS files, git blob sha1 otherwise: the hub's ETag
}

interface HubRepo {
  commit: string;
  files: Map<string, HubFile>;
}

/** LFS as the mlx-community .gitattributes has it: weights and tokenizer.json. */
const isLfs = (name: string): boolean => name.endsWith('.safetensors') || name === 'tokenizer.json' || name.endsWith('.model');

async function hashFile(path: string, size: number, lfs: boolean): Promise<string> {
  const h = createHash(lfs ? 'sha256' : 'sha1');
  if (!lfs) h.update(`blob ${size}\0`);
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

export class ReplicaHub {
  private readonly repos = new Map<string, HubRepo>();
  private server?: http.Server;
  url = '';

  /** Serves every top-level file of `dir` as repository `id`. */
  async addRepo(id: string, dir: string): Promise<void> {
    const files = new Map<string, HubFile>();
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const size = statSync(path).size;
      files.set(name, { path, size, lfs: isLfs(name), hash: await hashFile(path, size, isLfs(name)) });
    }
    const commit = createHash('sha1').update(id).update([...files.values()].map((f) => f.hash).join()).digest('hex');
    this.repos.set(id.toLowerCase(), { commit, files });
  }

  removeRepo(id: string): void {
    this.repos.delete(id.toLowerCase());
  }

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const notFound = (code: string, message: string): void => {
      res.writeHead(404, { 'content-type': 'application/json', 'x-error-code': code, 'x-error-message': message });
      res.end(JSON.stringify({ error: message }));
    };
    const info = /^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)$/.exec(path);
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    const repo = this.repos.get((info?.[1] ?? resolve?.[1] ?? '').toLowerCase());
    if (!repo) return notFound('RepoNotFound', `no route or repository for ${path}`);
    const rev = info?.[3] ?? resolve?.[2];
    if (rev !== 'main' && rev !== repo.commit) return notFound('RevisionNotFound', `Invalid rev id: ${rev}`);
    const lfsOf = (f: HubFile) => (f.lfs ? { lfs: { sha256: f.hash, oid: f.hash, size: f.size, pointerSize: 134 } } : {});
    if (info) {
      const entries = [...repo.files].map(([name, f]) => ({ name, f }));
      const body =
        info[2] === 'revision'
          ? { sha: repo.commit, siblings: entries.map(({ name, f }) => ({ rfilename: name, size: f.size, blobId: f.hash, ...lfsOf(f) })) }
          : entries.map(({ name, f }) => ({ type: 'file', path: name, oid: f.hash, size: f.size, ...lfsOf(f) }));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
      return;
    }
    const file = repo.files.get(resolve![3]!);
    if (!file) return notFound('EntryNotFound', `${resolve![3]} does not exist`);
    const start = Number(/^bytes=(\d+)-$/.exec(req.headers.range ?? '')?.[1] ?? 0);
    if (start > 0 && start >= file.size) {
      res.writeHead(416, { 'content-range': `bytes */${file.size}` });
      res.end();
      return;
    }
    res.writeHead(start > 0 ? 206 : 200, {
      'x-repo-commit': repo.commit,
      etag: `"${file.hash}"`,
      ...(file.lfs ? { 'x-linked-etag': `"${file.hash}"`, 'x-linked-size': String(file.size) } : {}),
      'accept-ranges': 'bytes',
      'content-type': 'application/octet-stream',
      'content-length': String(file.size - start),
      ...(start > 0 ? { 'content-range': `bytes ${start}-${file.size - 1}/${file.size}` } : {}),
    });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file.path, { start }).pipe(res);
  }
}
