// A local stand-in for the Hugging Face hub, served by node:http on 127.0.0.1: model info
// (revision + tree), resolve with a 302 to a CDN path for LFS files, Range requests, ETags,
// private repos behind a bearer token, and fault injection (dropped connections, corrupt bytes).
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeFile {
  data: Buffer;
  lfs: boolean;
  sha256: string;
  gitSha1: string;
}

export interface FakeRepo {
  id: string;
  commit: string;
  private?: boolean;
  files: Map<string, FakeFile>;
}

export interface LoggedRequest {
  method: string;
  path: string;
  range?: string;
  authorization?: string;
}

export interface Faults {
  /** Drop the connection after this many body bytes of `file`, `times` times. */
  drop?: { file: string; afterBytes: number; times: number };
  /** Serve `file` with one byte flipped (the published sha256 stays the original). */
  corrupt?: { file: string };
  /** Answer the next `count` model-info requests with this status. */
  infoStatus?: { status: number; count: number };
  /** Ignore Range headers (answer 200 with the whole file). */
  ignoreRange?: boolean;
  /** Accept requests and never answer them (a hung server). */
  stall?: boolean;
}

export function gitBlobSha1(data: Buffer): string {
  return createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
}

export function fakeFile(data: Buffer | string, lfs?: boolean): FakeFile {
  const buf = typeof data === 'string' ? Buffer.from(data) : data;
  return { data: buf, lfs: lfs ?? false, sha256: createHash('sha256').update(buf).digest('hex'), gitSha1: gitBlobSha1(buf) };
}

/** A valid safetensors file with random tensor data. */
export function makeSafetensors(tensors: { name: string; dtype: 'F16' | 'BF16' | 'F32' | 'U32'; shape: number[] }[]): Buffer {
  const size = { F16: 2, BF16: 2, F32: 4, U32: 4 };
  let offset = 0;
  const header: Record<string, unknown> = { __metadata__: { format: 'mlx' } };
  for (const t of tensors) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * size[t.dtype];
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = Buffer.from(JSON.stringify(header));
  const pad = (8 - (json.length % 8)) % 8;
  json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, json, randomBytes(offset)]);
}

/** A tiny MLX-style 4-bit Qwen2-shaped checkpoint: config, tokenizer, two weight shards + index. */
export function tinyModelFiles(opts: { sharded?: boolean; hidden?: number; extra?: Record<string, string> } = {}): Map<string, FakeFile> {
  const h = opts.hidden ?? 64;
  const vocab = 256;
  const files = new Map<string, FakeFile>();
  const config = {
    architectures: ['Qwen2ForCausalLM'],
    model_type: 'qwen2',
    hidden_size: h,
    intermediate_size: h * 2,
    num_hidden_layers: 1,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: vocab,
    max_position_embeddings: 4096,
    tie_word_embeddings: true,
    quantization: { group_size: 32, bits: 4, 'model.layers.0.mlp.down_proj': { group_size: 32, bits: 8 } },
  };
  files.set('config.json', fakeFile(JSON.stringify(config, null, 2)));
  files.set('tokenizer.json', fakeFile(JSON.stringify({ version: '1.0', model: { type: 'BPE', vocab: { a: 0 }, merges: [] } }), true));
  files.set('tokenizer_config.json', fakeFile(JSON.stringify({ eos_token: '<|im_end|>', chat_template: '{{ messages }}' })));
  files.set('generation_config.json', fakeFile(JSON.stringify({ temperature: 0.7 })));
  files.set('README.md', fakeFile('# tiny\n'));
  files.set('.gitattributes', fakeFile('*.safetensors filter=lfs\n'));
  files.set('original/consolidated.pth', fakeFile(randomBytes(1000), true));
  const q = (name: string, out: number, inp: number, bits = 4) => [
    { name: `${name}.weight`, dtype: 'U32' as const, shape: [out, (inp * bits) / 32] },
    { name: `${name}.scales`, dtype: 'F16' as const, shape: [out, inp / 32] },
    { name: `${name}.biases`, dtype: 'F16' as const, shape: [out, inp / 32] },
  ];
  const a = [...q('model.embed_tokens', vocab, h), ...q('model.layers.0.self_attn.q_proj', h, h), { name: 'model.norm.weight', dtype: 'F16' as const, shape: [h] }];
  const b = [...q('model.layers.0.mlp.up_proj', h * 2, h), ...q('model.layers.0.mlp.down_proj', h, h * 2, 8), { name: 'model.layers.0.input_layernorm.weight', dtype: 'F16' as const, shape: [h] }];
  if (opts.sharded === false) {
    files.set('model.safetensors', fakeFile(makeSafetensors([...a, ...b]), true));
  } else {
    files.set('model-00001-of-00002.safetensors', fakeFile(makeSafetensors(a), true));
    files.set('model-00002-of-00002.safetensors', fakeFile(makeSafetensors(b), true));
    const weightMap: Record<string, string> = {};
    for (const t of a) weightMap[t.name] = 'model-00001-of-00002.safetensors';
    for (const t of b) weightMap[t.name] = 'model-00002-of-00002.safetensors';
    files.set('model.safetensors.index.json', fakeFile(JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap })));
  }
  for (const [k, v] of Object.entries(opts.extra ?? {})) files.set(k, fakeFile(v));
  return files;
}

export class FakeHub {
  readonly repos = new Map<string, FakeRepo>();
  readonly log: LoggedRequest[] = [];
  faults: Faults = {};
  token = 'hf_test_token';
  private server?: http.Server;
  private cdn?: http.Server; // a second origin, like cdn-lfs.huggingface.co
  url = '';
  cdnUrl = '';

  addRepo(id: string, files: Map<string, FakeFile>, opts: { private?: boolean; commit?: string } = {}): FakeRepo {
    const repo: FakeRepo = { id, commit: opts.commit ?? createHash('sha1').update(`${id}${Math.random()}`).digest('hex'), private: opts.private, files };
    this.repos.set(id.toLowerCase(), repo);
    return repo;
  }

  requests(filter?: (r: LoggedRequest) => boolean): LoggedRequest[] {
    return filter ? this.log.filter(filter) : this.log;
  }

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.cdn = http.createServer((req, res) => this.handle(req, res));
    await new Promise<void>((r) => this.server?.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => this.cdn?.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    this.cdnUrl = `http://127.0.0.1:${(this.cdn.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    for (const srv of [this.server, this.cdn]) {
      srv?.closeAllConnections();
      await new Promise<void>((r) => srv?.close(() => r()));
    }
  }

  private authorized(repo: FakeRepo, req: http.IncomingMessage): 'ok' | 'missing' | 'bad' {
    if (!repo.private) return 'ok';
    const auth = req.headers.authorization;
    if (!auth) return 'missing';
    return auth === `Bearer ${this.token}` ? 'ok' : 'bad';
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const path = decodeURIComponent(url.pathname);
    this.log.push({ method: req.method ?? 'GET', path, range: req.headers.range, authorization: req.headers.authorization });
    if (this.faults.stall) return; // the socket stays open, no response
    const fail = (status: number, code: string, message: string) => {
      res.writeHead(status, { 'content-type': 'application/json', 'x-error-code': code, 'x-error-message': message });
      res.end(JSON.stringify({ error: message }));
    };

    let m = /^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)$/.exec(path);
    if (m) {
      const repo = this.repos.get(m[1].toLowerCase());
      if (this.faults.infoStatus && this.faults.infoStatus.count > 0) {
        this.faults.infoStatus.count--;
        return fail(this.faults.infoStatus.status, 'Busy', 'try later');
      }
      if (!repo) return fail(401, 'RepoNotFound', 'Repository not found');
      const auth = this.authorized(repo, req);
      if (auth !== 'ok') return fail(401, auth === 'missing' ? 'RepoNotFound' : 'InvalidCredentials', 'Invalid credentials in Authorization header');
      if (m[3] !== 'main' && m[3] !== repo.commit) return fail(404, 'RevisionNotFound', `Invalid rev id: ${m[3]}`);
      const entries = [...repo.files].map(([name, f]) => ({ name, f }));
      res.writeHead(200, { 'content-type': 'application/json' });
      if (m[2] === 'revision') {
        const siblings = entries.map(({ name, f }) => ({
          rfilename: name,
          size: f.data.length,
          blobId: f.gitSha1,
          ...(f.lfs ? { lfs: { sha256: f.sha256, size: f.data.length, pointerSize: 134 } } : {}),
        }));
        res.end(JSON.stringify({ id: repo.id, sha: repo.commit, private: !!repo.private, siblings }));
      } else {
        res.end(
          JSON.stringify(
            entries
              .filter(({ name }) => !name.includes('/'))
              .map(({ name, f }) => ({ type: 'file', path: name, oid: f.gitSha1, size: f.data.length, ...(f.lfs ? { lfs: { oid: f.sha256, size: f.data.length, pointerSize: 134 } } : {}) })),
          ),
        );
      }
      return;
    }

    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m) {
      const repo = this.repos.get(m[1].toLowerCase());
      if (!repo) return fail(401, 'RepoNotFound', 'Repository not found');
      const auth = this.authorized(repo, req);
      if (auth !== 'ok') return fail(401, 'RepoNotFound', 'Invalid credentials');
      if (m[2] !== 'main' && m[2] !== repo.commit) return fail(404, 'RevisionNotFound', 'Invalid rev id');
      const file = repo.files.get(m[3]);
      if (!file) return fail(404, 'EntryNotFound', `${m[3]} does not exist`);
      const common = { 'x-repo-commit': repo.commit };
      if (file.lfs) {
        res.writeHead(302, {
          ...common,
          location: `${this.cdnUrl}/cdn/${repo.id}/${file.sha256}?name=${encodeURIComponent(m[3])}`,
          'x-linked-etag': `"${file.sha256}"`,
          'x-linked-size': String(file.data.length),
          etag: `W/"${file.gitSha1}"`,
        });
        res.end();
        return;
      }
      return this.sendBody(req, res, m[3], file, { ...common, etag: `"${file.gitSha1}"` });
    }

    m = /^\/cdn\/([^/]+\/[^/]+)\/([0-9a-f]{64})$/.exec(path);
    if (m) {
      const repo = this.repos.get(m[1].toLowerCase());
      const entry = repo && [...repo.files].find(([, f]) => f.sha256 === m?.[2]);
      if (!entry) return fail(404, 'NotFound', 'no such object');
      return this.sendBody(req, res, entry[0], entry[1], { etag: `"cdn-${entry[1].sha256.slice(0, 16)}"` });
    }
    fail(404, 'NotFound', `no route for ${path}`);
  }

  private sendBody(req: http.IncomingMessage, res: http.ServerResponse, name: string, file: FakeFile, headers: Record<string, string>): void {
    let data = file.data;
    if (this.faults.corrupt?.file === name) {
      data = Buffer.from(data);
      data[data.length >> 1] ^= 0xff;
    }
    let start = 0;
    let status = 200;
    const range = req.headers.range;
    const h: Record<string, string> = { ...headers, 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
    if (range && !this.faults.ignoreRange) {
      const r = /^bytes=(\d+)-$/.exec(range);
      if (r) {
        start = Number(r[1]);
        if (start >= data.length) {
          res.writeHead(416, { ...h, 'content-range': `bytes */${data.length}` });
          res.end();
          return;
        }
        status = 206;
        h['content-range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
      }
    }
    const body = data.subarray(start);
    h['content-length'] = String(body.length);
    res.writeHead(status, h);
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const drop = this.faults.drop;
    if (drop && drop.file === name && drop.times > 0 && body.length > drop.afterBytes) {
      drop.times--;
      // Send part of the body, then cut the connection mid-file. The cut waits long enough for a busy client to
      // have read those bytes: a fetch body that errors drops the chunks it still queues, and with 20 ms a loaded
      // CI machine sometimes resumed from the previous point (a flaky range check in pull.test.ts).
      res.write(body.subarray(0, drop.afterBytes), () => setTimeout(() => req.socket.destroy(), 200));
      return;
    }
    res.end(body);
  }
}
