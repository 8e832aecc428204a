// The archive `rapid models export` writes and `rapid models import` reads: a plain tar holding
// rapid-model.json (repo, revision, commit, and the size, sha256 and cache blob name of every
// file) followed by files/<path> for each file of the snapshot.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';

export const MANIFEST_NAME = 'rapid-model.json';
export const FILES_DIR = 'files';
export const ARCHIVE_FORMAT = 'rapid-model-archive/1';

export interface ArchivedFile {
  /** Path inside the snapshot, '/'-separated. */
  path: string;
  size: number;
  sha256: string;
  /** The blob name in the cache: the sha256 of an LFS file, else its git blob sha1. */
  etag: string;
}

export interface ArchiveManifest {
  format: typeof ARCHIVE_FORMAT;
  repo: string;
  revision: string;
  commit: string;
  files: ArchivedFile[];
}

export interface FileHashes {
  size: number;
  sha256: string;
  gitSha1: string;
}

/** sha256 and git blob sha1 of a file in one streaming read. */
export async function hashFile(path: string, size: number): Promise<FileHashes> {
  const sha256 = createHash('sha256');
  const sha1 = createHash('sha1').update(`blob ${size}\0`);
  let n = 0;
  for await (const chunk of createReadStream(path)) {
    sha256.update(chunk as Buffer);
    sha1.update(chunk as Buffer);
    n += (chunk as Buffer).length;
  }
  return { size: n, sha256: sha256.digest('hex'), gitSha1: sha1.digest('hex') };
}

/** Whether `etag` names these contents (64 hex: sha256; 40 hex: git blob sha1). */
export function etagMatches(etag: string, h: FileHashes): boolean {
  return etag === h.sha256 || etag === h.gitSha1;
}

/** A relative, '/'-separated path with no empty, '.' or '..' segment (no way out of its folder). */
export function isSafeRelativePath(p: string): boolean {
  if (p === '' || p.startsWith('/') || p.includes('\\') || p.includes('\0') || /^[A-Za-z]:/.test(p)) return false;
  return p.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..');
}
