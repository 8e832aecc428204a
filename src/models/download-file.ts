// Downloads one file into the blob store: resumable (Range into <blob>.incomplete), checked
// against the hub's ETag, size and sha256 (LFS) or git blob sha1 (small files), then renamed.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { HubError, IntegrityError } from './errors.js';
import { RetryableError, type HubClient } from './hub-client.js';

export interface BlobSpec {
  repo: string;
  commit: string;
  file: string; // path in the repo
  etag: string; // blob name: sha256 for LFS files, git sha1 otherwise
  size?: number;
  sha256?: string; // LFS files
  gitSha1?: string; // non-LFS files
  dest: string; // final blob path
}

export interface BlobProgress {
  fileBytes: number; // bytes of this file on disk so far
  delta: number; // bytes added since the last call
  resumedFrom?: number; // set on the first call when a partial download was resumed
}

async function hashFilePrefix(path: string, hash: Hash): Promise<void> {
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
}

async function gitBlobSha1(path: string, size: number): Promise<string> {
  const h = createHash('sha1').update(`blob ${size}\0`);
  await hashFilePrefix(path, h);
  return h.digest('hex');
}

function parseContentRangeStart(v: string | null): number | undefined {
  const m = v && /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(v.trim());
  return m ? Number(m[1]) : undefined;
}

/** Downloads `spec` unless the blob already exists; returns the number of bytes fetched. */
export async function downloadBlob(client: HubClient, spec: BlobSpec, onProgress?: (p: BlobProgress) => void): Promise<number> {
  const partial = `${spec.dest}.incomplete`;
  mkdirSync(dirname(spec.dest), { recursive: true });
  let have = existsSync(partial) ? statSync(partial).size : 0;
  if (spec.size !== undefined && have > spec.size) {
    rmSync(partial, { force: true });
    have = 0;
  }
  // sha256 is kept incrementally across resumes: the bytes already on disk are hashed once.
  let sha = spec.sha256 ? createHash('sha256') : undefined;
  if (sha && have > 0) await hashFilePrefix(partial, sha);
  const resumedFrom = have > 0 ? have : undefined;
  let fetched = 0;
  let reported = false;
  const report = (delta: number) => {
    onProgress?.({ fileBytes: have, delta, resumedFrom: reported ? undefined : resumedFrom });
    reported = true;
  };
  report(0);

  await client.withRetries(`download of ${spec.repo}/${spec.file}`, async () => {
    if (spec.size !== undefined && have === spec.size) return; // complete; verified below
    const opened = await client.openFile(spec.repo, spec.commit, spec.file, have);
    let fh: FileHandle | undefined;
    try {
      const res = opened.response;
      if (opened.etag && opened.etag !== spec.etag && opened.etag !== spec.sha256 && opened.etag !== spec.gitSha1) {
        throw new HubError(`${spec.repo}/${spec.file}: the hub serves ETag ${opened.etag} at commit ${spec.commit}, but its file list says ${spec.etag}; try again later`);
      }
      if (res.status === 416) {
        // Our partial file is at least as long as the remote one: verify what we have.
        await res.body?.cancel();
        if (spec.size === undefined || have !== spec.size) {
          rmSync(partial, { force: true });
          have = 0;
          sha = spec.sha256 ? createHash('sha256') : undefined;
          throw new RetryableError(`the hub refused to resume ${spec.file} (HTTP 416); starting over`);
        }
        return;
      }
      let append = have > 0 && res.status === 206;
      if (append && parseContentRangeStart(res.headers.get('content-range')) !== have) append = false;
      if (!append && have > 0) {
        // The server ignored the Range (200) or answered another range: start from zero.
        if (res.status === 206) {
          await res.body?.cancel();
          rmSync(partial, { force: true });
          have = 0;
          sha = spec.sha256 ? createHash('sha256') : undefined;
          throw new RetryableError(`unexpected Content-Range for ${spec.file}; starting over`);
        }
        have = 0;
        sha = spec.sha256 ? createHash('sha256') : undefined;
      }
      fh = await open(partial, append ? 'a' : 'w');
      if (!res.body) throw new RetryableError(`empty response body for ${spec.file}`);
      const reader = res.body.getReader();
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          const e = err as Error & { cause?: Error };
          throw new RetryableError(`connection lost during ${spec.file} after ${have} bytes (${e.cause?.message ?? e.message})`);
        }
        if (chunk.done) break;
        opened.touch();
        await fh.write(chunk.value);
        sha?.update(chunk.value);
        have += chunk.value.byteLength;
        fetched += chunk.value.byteLength;
        if (spec.size !== undefined && have > spec.size) break; // caught by the size check below
        report(chunk.value.byteLength);
      }
      if (spec.size !== undefined && have < spec.size) {
        throw new RetryableError(`connection closed early during ${spec.file} at ${have} of ${spec.size} bytes`);
      }
    } finally {
      opened.close();
      await fh?.close();
    }
  });

  // Verification: a wrong file is deleted, never linked into a snapshot.
  const fail = (what: string) => {
    rmSync(partial, { force: true });
    return new IntegrityError(`${spec.repo}/${spec.file}: ${what}. The download was deleted; run the pull again (if it repeats, the hub copy or a proxy is corrupting it)`);
  };
  if (spec.size !== undefined && have !== spec.size) throw fail(`got ${have} bytes, the hub says ${spec.size}`);
  if (sha && spec.sha256) {
    const got = sha.digest('hex');
    if (got !== spec.sha256) throw fail(`sha256 mismatch (expected ${spec.sha256}, got ${got})`);
  } else if (spec.gitSha1 && spec.size !== undefined) {
    const got = await gitBlobSha1(partial, have);
    if (got !== spec.gitSha1) throw fail(`checksum mismatch (expected git blob ${spec.gitSha1}, got ${got})`);
  }
  renameSync(partial, spec.dest);
  return fetched;
}
