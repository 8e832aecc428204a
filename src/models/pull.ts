// `pull`: brings the files rapid needs from a hub repo into the HF cache, skipping what is
// already there (from rapid or any other HF tool) and resuming what was interrupted.
import { existsSync, readFileSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { downloadBlob } from './download-file.js';
import { HubError, ModelError, OfflineError } from './errors.js';
import { indexShards, missingLocalFiles, selectRepoFiles, WEIGHT_INDEX, type SafetensorsIndex } from './file-selection.js';
import { blobPath, cachedSnapshot, linkSnapshotFile, repoDir, snapshotDir, snapshotFileEtag, writeRef } from './hf-cache.js';
import { HubClient, type HubClientOptions, type RepoSibling, type RetryInfo } from './hub-client.js';
import { acquireDownloadLock } from './download-lock.js';
import { formatBytes } from './format-bytes.js';

export interface PullFile {
  name: string;
  sizeBytes: number;
  status: 'cached' | 'linked' | 'downloaded';
}

export interface PullResult {
  repo: string;
  revision: string;
  commit: string;
  dir: string; // the snapshot directory: what the engine loads
  files: PullFile[];
  downloadedBytes: number;
  totalBytes: number;
  offline: boolean; // answered from the cache without contacting the hub
}

export type PullEvent =
  | { type: 'resolved'; repo: string; revision: string; commit: string }
  | { type: 'plan'; files: { name: string; sizeBytes: number; cached: boolean }[]; totalBytes: number; downloadBytes: number }
  | { type: 'file-start'; name: string; sizeBytes: number; resumeFrom: number }
  | { type: 'bytes'; name: string; fileBytes: number; fileSize: number; doneBytes: number; downloadBytes: number }
  | { type: 'file-done'; name: string }
  | { type: 'retry'; info: RetryInfo }
  | { type: 'done'; result: PullResult };

export interface PullOptions extends Omit<HubClientOptions, 'onRetry'> {
  revision?: string;
  onProgress?: (e: PullEvent) => void;
  /** Called with config.json once it is in the cache, before any weights; throw to stop the pull. */
  onConfig?: (config: Record<string, unknown>) => void;
}

function fileSize(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined;
  }
}

/** Is the snapshot entry already the wanted content? (a symlink to the right blob, or a copy of the right size) */
function snapshotHas(path: string, etag: string, size: number | undefined): boolean {
  const linked = snapshotFileEtag(path);
  if (linked !== undefined) return linked === etag && existsSync(path);
  const s = fileSize(path);
  return s !== undefined && (size === undefined || s === size);
}

function freeBytes(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return undefined;
  }
}

/** The snapshot a revision already has in the cache, when it holds everything rapid needs. */
export function completeCachedSnapshot(cacheDir: string, repo: string, revision: string): string | undefined {
  const dir = cachedSnapshot(cacheDir, repo, revision);
  return dir && missingLocalFiles(dir).length === 0 ? dir : undefined;
}

export async function pullRepo(repo: string, opts: PullOptions = {}): Promise<PullResult> {
  const revision = opts.revision ?? 'main';
  const emit = opts.onProgress ?? (() => {});
  const client = new HubClient({ ...opts, onRetry: (info) => emit({ type: 'retry', info }) });
  const { cacheDir } = client.hub;

  if (client.hub.offline) {
    const dir = completeCachedSnapshot(cacheDir, repo, revision);
    if (!dir) {
      const partial = cachedSnapshot(cacheDir, repo, revision);
      const why = partial ? `its snapshot in the cache lacks ${missingLocalFiles(partial).join(', ')}` : `it is not in the cache (${cacheDir})`;
      throw new OfflineError(`${repo}@${revision} is not available offline: ${why}. HF_HUB_OFFLINE=1 forbids downloads; unset it to download, or point HF_HUB_CACHE at a cache that has the model`);
    }
    const commit = dir.split(/[\\/]/).pop() as string;
    const result: PullResult = { repo, revision, commit, dir, files: [], downloadedBytes: 0, totalBytes: 0, offline: true };
    emit({ type: 'done', result });
    return result;
  }

  const info = await client.repoInfo(repo, revision);
  const canonical = info.repo;
  emit({ type: 'resolved', repo: canonical, revision, commit: info.commit });
  const sel = selectRepoFiles(info.siblings.map((s) => s.name));
  if (sel.missing.length) {
    const formats = [...new Set(info.siblings.map((s) => s.name.split('.').pop()).filter((x) => x && ['gguf', 'bin', 'pth', 'onnx', 'pt'].includes(x)))];
    throw new HubError(
      `${canonical} cannot be run by rapid: it has no ${sel.missing.join(', ')}` +
        (formats.length ? ` (it ships ${formats.map((f) => `.${f}`).join(', ')} files)` : '') +
        '. rapid reads safetensors checkpoints with a tokenizer.json, such as the mlx-community conversions',
    );
  }

  let siblings = new Map<string, RepoSibling>(info.siblings.map((s) => [s.name, s]));
  const needsMeta = (names: string[]) => names.some((n) => siblings.get(n)?.size === undefined || (!siblings.get(n)?.blobId && !siblings.get(n)?.sha256));
  if (needsMeta(sel.files)) {
    // Some mirrors omit sizes and hashes from model info; the tree listing has them.
    siblings = new Map((await client.listTree(canonical, info.commit)).map((s) => [s.name, s]));
  }

  const snap = snapshotDir(cacheDir, canonical, info.commit);
  const result: PullResult = { repo: canonical, revision, commit: info.commit, dir: snap, files: [], downloadedBytes: 0, totalBytes: 0, offline: false };
  let doneBytes = 0;
  let downloadBytes = 0;

  const fetchOne = async (name: string, silent = false): Promise<void> => {
    const s = siblings.get(name);
    if (!s) throw new HubError(`${canonical}: ${name} is listed by ${WEIGHT_INDEX} but missing from the repo`);
    const etag = s.sha256 ?? s.blobId;
    if (!etag) throw new HubError(`${canonical}: the hub gave no hash for ${name}; cannot place it in the cache`);
    const target = join(snap, ...name.split('/'));
    const size = s.size ?? 0;
    result.totalBytes += size;
    if (snapshotHas(target, etag, s.size)) {
      result.files.push({ name, sizeBytes: size, status: 'cached' });
      return;
    }
    const blob = blobPath(cacheDir, canonical, etag);
    if (fileSize(blob) !== undefined && (s.size === undefined || fileSize(blob) === s.size)) {
      linkSnapshotFile(cacheDir, canonical, info.commit, name, etag);
      result.files.push({ name, sizeBytes: size, status: 'linked' });
      return;
    }
    const release = acquireDownloadLock(cacheDir, canonical, etag);
    try {
      let started = false;
      const got = await downloadBlob(
        client,
        { repo: canonical, commit: info.commit, file: name, etag, size: s.size, sha256: s.sha256, gitSha1: s.sha256 ? undefined : s.blobId, dest: blob },
        (p) => {
          if (silent) return;
          if (!started) {
            started = true;
            emit({ type: 'file-start', name, sizeBytes: size, resumeFrom: p.resumedFrom ?? 0 });
            doneBytes += p.resumedFrom ?? 0;
          }
          doneBytes += p.delta;
          if (p.delta > 0) emit({ type: 'bytes', name, fileBytes: p.fileBytes, fileSize: size, doneBytes, downloadBytes });
        },
      );
      result.downloadedBytes += got;
    } finally {
      release();
    }
    linkSnapshotFile(cacheDir, canonical, info.commit, name, etag);
    if (!silent) emit({ type: 'file-done', name });
    result.files.push({ name, sizeBytes: size, status: 'downloaded' });
  };

  // The index comes first: it names the weight shards.
  let files = sel.files;
  if (sel.needsIndex) {
    await fetchOne(WEIGHT_INDEX, true); // tiny; reported as part of the plan below
    let index: SafetensorsIndex;
    try {
      index = JSON.parse(readFileSync(join(snap, WEIGHT_INDEX), 'utf8')) as SafetensorsIndex;
    } catch (err) {
      throw new HubError(`${canonical}: ${WEIGHT_INDEX} is not valid JSON (${(err as Error).message})`);
    }
    files = [...sel.files, ...indexShards(index)];
  }

  // Plan: what is cached, what must come over the network, and is there room for it.
  const plan = files.map((name) => {
    const s = siblings.get(name);
    const etag = s?.sha256 ?? s?.blobId ?? '';
    // The index was fetched just above: it counts as part of this download if it was not cached.
    const fetchedIndex = name === WEIGHT_INDEX && result.files.find((f) => f.name === WEIGHT_INDEX)?.status === 'downloaded';
    const cached =
      !fetchedIndex &&
      !!etag &&
      (snapshotHas(join(snap, ...name.split('/')), etag, s?.size) || fileSize(blobPath(cacheDir, canonical, etag)) === s?.size);
    const partial = etag ? (fileSize(`${blobPath(cacheDir, canonical, etag)}.incomplete`) ?? 0) : 0;
    return { name, sizeBytes: s?.size ?? 0, cached, remaining: cached || fetchedIndex ? 0 : Math.max(0, (s?.size ?? 0) - partial) };
  });
  downloadBytes = plan.reduce((a, p) => a + (p.cached ? 0 : p.sizeBytes), 0);
  doneBytes = result.files.filter((f) => f.status === 'downloaded').reduce((a, f) => a + f.sizeBytes, 0);
  const remaining = plan.reduce((a, p) => a + p.remaining, 0);
  const free = freeBytes(existsSync(repoDir(cacheDir, canonical)) ? repoDir(cacheDir, canonical) : existsSync(cacheDir) ? cacheDir : '/');
  if (free !== undefined && remaining > free) {
    throw new ModelError(`${canonical} needs ${formatBytes(remaining)} more, but only ${formatBytes(free)} is free in ${cacheDir}. Free some space (\`rapid models rm\`) or set HF_HUB_CACHE to a bigger disk`);
  }
  emit({ type: 'plan', files: plan.map(({ name, sizeBytes, cached }) => ({ name, sizeBytes, cached })), totalBytes: plan.reduce((a, p) => a + p.sizeBytes, 0), downloadBytes });

  // Metadata first, smallest first (config.json can stop the pull), then the shards in order.
  let configChecked = false;
  const isWeight = (f: string) => (f.endsWith('.safetensors') ? 1 : 0);
  const ordered = [...files].sort(
    (a, b) => isWeight(a) - isWeight(b) || (isWeight(a) ? a.localeCompare(b) : (siblings.get(a)?.size ?? 0) - (siblings.get(b)?.size ?? 0)),
  );
  for (const name of ordered) {
    if (sel.needsIndex && name === WEIGHT_INDEX) continue;
    if (name.endsWith('.safetensors') && opts.onConfig && !configChecked) {
      configChecked = true;
      opts.onConfig(JSON.parse(readFileSync(join(snap, 'config.json'), 'utf8')) as Record<string, unknown>);
    }
    await fetchOne(name);
  }

  writeRef(cacheDir, canonical, revision, info.commit);
  const missing = missingLocalFiles(snap);
  if (missing.length) throw new ModelError(`${canonical}: after the download the snapshot still lacks ${missing.join(', ')}`);
  emit({ type: 'done', result });
  return result;
}
