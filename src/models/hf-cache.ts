// The Hugging Face hub cache layout, shared with huggingface_hub, mlx-lm and transformers:
//   <cache>/models--org--name/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/<rev>}
// Blobs are content-addressed (sha256 for LFS files, git sha1 otherwise); snapshot entries are
// relative symlinks, so several revisions share one copy of each file.
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

export const COMMIT_RE = /^[0-9a-f]{40}$/;

export function repoFolderName(repo: string): string {
  return `models--${repo.split('/').join('--')}`;
}

/** "models--org--name" -> "org/name" (hub names never contain "--"). */
export function repoFromFolder(folder: string): string | undefined {
  if (!folder.startsWith('models--')) return undefined;
  const parts = folder.slice('models--'.length).split('--');
  return parts.length === 2 && parts[0] && parts[1] ? `${parts[0]}/${parts[1]}` : undefined;
}

export function repoDir(cacheDir: string, repo: string): string {
  return join(cacheDir, repoFolderName(repo));
}

export function blobPath(cacheDir: string, repo: string, etag: string): string {
  return join(repoDir(cacheDir, repo), 'blobs', etag);
}

export function snapshotDir(cacheDir: string, repo: string, commit: string): string {
  return join(repoDir(cacheDir, repo), 'snapshots', commit);
}

/** The commit a revision points at in the cache: a commit hash directly, else refs/<revision>. */
export function readRef(cacheDir: string, repo: string, revision: string): string | undefined {
  if (COMMIT_RE.test(revision)) return existsSync(snapshotDir(cacheDir, repo, revision)) ? revision : undefined;
  const ref = join(repoDir(cacheDir, repo), 'refs', ...revision.split('/'));
  try {
    const commit = readFileSync(ref, 'utf8').trim();
    return COMMIT_RE.test(commit) ? commit : undefined;
  } catch {
    return undefined;
  }
}

export function writeRef(cacheDir: string, repo: string, revision: string, commit: string): void {
  if (revision === commit) return;
  const ref = join(repoDir(cacheDir, repo), 'refs', ...revision.split('/'));
  mkdirSync(dirname(ref), { recursive: true });
  const tmp = `${ref}.tmp-${process.pid}`;
  writeFileSync(tmp, commit);
  renameSync(tmp, ref);
}

/**
 * Points snapshots/<commit>/<file> at blobs/<etag> with a relative symlink (what huggingface_hub
 * does). Where symlinks are refused (some network or Windows file systems), the blob is copied.
 */
export function linkSnapshotFile(cacheDir: string, repo: string, commit: string, file: string, etag: string): string {
  const target = join(snapshotDir(cacheDir, repo, commit), ...file.split('/'));
  const blob = blobPath(cacheDir, repo, etag);
  mkdirSync(dirname(target), { recursive: true });
  try {
    lstatSync(target);
    unlinkSync(target);
  } catch {
    // nothing to replace
  }
  try {
    symlinkSync(relative(dirname(target), blob), target);
  } catch {
    copyFileSync(blob, target);
  }
  return target;
}

/** The snapshot file's blob name if it is a symlink into blobs/, else undefined. */
export function snapshotFileEtag(path: string): string | undefined {
  try {
    if (!lstatSync(path).isSymbolicLink()) return undefined;
    const target = resolve(dirname(path), readlinkSync(path));
    return target.split(/[\\/]/).pop();
  } catch {
    return undefined;
  }
}

export interface CachedFile {
  path: string; // relative to the snapshot
  sizeBytes: number; // 0 when dangling
  dangling: boolean; // a symlink whose blob is gone
}

export interface CachedSnapshot {
  commit: string;
  dir: string;
  refs: string[]; // refs pointing here (e.g. ["main"])
  files: CachedFile[];
}

export interface IncompleteBlob {
  path: string;
  sizeBytes: number;
  modifiedMs: number;
}

export interface CachedRepo {
  repo: string;
  dir: string;
  snapshots: CachedSnapshot[];
  sizeBytes: number; // on disk: blobs (including incomplete ones) plus non-symlinked snapshot files
  incomplete: IncompleteBlob[];
  danglingRefs: string[]; // refs naming a snapshot that does not exist
  modifiedMs: number;
}

function walkFiles(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const ent of readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${ent.name}` : ent.name;
    if (ent.isDirectory()) out.push(...walkFiles(join(dir, ent.name), rel));
    else out.push(rel);
  }
  return out;
}

function readRefs(dir: string): Map<string, string> {
  const refs = new Map<string, string>();
  const root = join(dir, 'refs');
  if (!existsSync(root)) return refs;
  for (const rel of walkFiles(root)) {
    try {
      refs.set(rel, readFileSync(join(root, rel), 'utf8').trim());
    } catch {
      // unreadable ref: ignored like a missing one
    }
  }
  return refs;
}

/** Reads one repo folder of the cache; undefined when it is not a model repo. */
export function readCachedRepo(cacheDir: string, repo: string): CachedRepo | undefined {
  const dir = repoDir(cacheDir, repo);
  if (!existsSync(dir)) return undefined;
  const refs = readRefs(dir);
  const snapshots: CachedSnapshot[] = [];
  let sizeBytes = 0;
  const incomplete: IncompleteBlob[] = [];
  const blobsDir = join(dir, 'blobs');
  let modifiedMs = statSync(dir).mtimeMs;
  if (existsSync(blobsDir)) {
    for (const name of readdirSync(blobsDir)) {
      const st = statSync(join(blobsDir, name));
      sizeBytes += st.size;
      modifiedMs = Math.max(modifiedMs, st.mtimeMs);
      if (name.endsWith('.incomplete')) incomplete.push({ path: join(blobsDir, name), sizeBytes: st.size, modifiedMs: st.mtimeMs });
    }
  }
  const snapRoot = join(dir, 'snapshots');
  if (existsSync(snapRoot)) {
    for (const commit of readdirSync(snapRoot)) {
      const sdir = join(snapRoot, commit);
      if (!statSync(sdir).isDirectory()) continue;
      const files: CachedFile[] = walkFiles(sdir).map((rel) => {
        const full = join(sdir, rel);
        const link = lstatSync(full);
        try {
          const st = statSync(full);
          if (!link.isSymbolicLink()) sizeBytes += st.size; // copied, not linked: counts on its own
          return { path: rel, sizeBytes: st.size, dangling: false };
        } catch {
          return { path: rel, sizeBytes: 0, dangling: true };
        }
      });
      const pointing = [...refs].filter(([, c]) => c === commit).map(([r]) => r);
      snapshots.push({ commit, dir: sdir, refs: pointing, files });
    }
  }
  const commits = new Set(snapshots.map((s) => s.commit));
  const danglingRefs = [...refs].filter(([, c]) => !commits.has(c)).map(([r]) => r);
  return { repo, dir, snapshots, sizeBytes, incomplete, danglingRefs, modifiedMs };
}

/** Every model repo in the cache (datasets and spaces are skipped). */
export function listCachedRepos(cacheDir: string): CachedRepo[] {
  if (!existsSync(cacheDir)) return [];
  const out: CachedRepo[] = [];
  for (const folder of readdirSync(cacheDir).sort()) {
    const repo = repoFromFolder(folder);
    if (!repo) continue;
    const r = readCachedRepo(cacheDir, repo);
    if (r) out.push(r);
  }
  return out;
}

/** The snapshot a revision resolves to in the cache, if any. */
export function cachedSnapshot(cacheDir: string, repo: string, revision: string): string | undefined {
  const commit = readRef(cacheDir, repo, revision);
  if (!commit) return undefined;
  const dir = snapshotDir(cacheDir, repo, commit);
  return existsSync(dir) ? dir : undefined;
}

/** Deletes a repo folder from the cache; returns the bytes it held. */
export function removeCachedRepo(cacheDir: string, repo: string): number {
  const info = readCachedRepo(cacheDir, repo);
  if (!info) return 0;
  rmSync(info.dir, { recursive: true, force: true });
  // huggingface_hub keeps lock files under .locks/<folder>; they are empty, but tidy them too.
  rmSync(join(cacheDir, '.locks', repoFolderName(repo)), { recursive: true, force: true });
  return info.sizeBytes;
}
