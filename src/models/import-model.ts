// `rapid models import FILE.tar`: installs an exported model into the download cache. Every entry
// is checked before anything is written to the cache (plain files under files/ only, no path
// leaving the archive), every file's size and sha256 against the manifest, and only then are the
// blobs moved in; on any failure the cache is left as it was.
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { extract, list } from 'tar';
import { ModelError } from './errors.js';
import { blobPath, COMMIT_RE, linkSnapshotFile, repoDir, snapshotDir, writeRef } from './hf-cache.js';
import { hubCacheDir, type Env } from './hub-env.js';
import { ARCHIVE_FORMAT, etagMatches, FILES_DIR, hashFile, isSafeRelativePath, MANIFEST_NAME, type ArchiveManifest } from './model-archive.js';
import { isRepoId } from './resolve-spec.js';

export interface ImportResult {
  repo: string;
  revision: string;
  commit: string;
  dir: string;
  files: number;
  bytes: number;
}

function refused(file: string, why: string): ModelError {
  return new ModelError(`${file}: refused: ${why}; nothing was imported`);
}

/** Refuses links, devices, absolute paths, '..' and anything outside the manifest and files/. */
async function checkEntries(file: string): Promise<void> {
  const problems: string[] = [];
  await list({
    file,
    strict: true,
    onReadEntry: (e) => {
      const path = e.path.replace(/\/$/, '');
      if (!isSafeRelativePath(path)) problems.push(`entry "${e.path}" points outside the archive`);
      else if (e.type === 'Directory') {
        if (path !== FILES_DIR && !path.startsWith(`${FILES_DIR}/`)) problems.push(`unexpected folder "${e.path}"`);
      } else if (e.type !== 'File' && e.type !== 'OldFile') problems.push(`entry "${e.path}" is a ${e.type}, not a plain file`);
      else if (path !== MANIFEST_NAME && !path.startsWith(`${FILES_DIR}/`)) problems.push(`unexpected entry "${e.path}"`);
    },
  });
  if (problems.length > 0) throw refused(file, problems.slice(0, 3).join('; '));
}

function readManifest(file: string, staging: string): ArchiveManifest {
  let m: ArchiveManifest;
  try {
    m = JSON.parse(readFileSync(join(staging, MANIFEST_NAME), 'utf8')) as ArchiveManifest;
  } catch {
    throw refused(file, `no readable ${MANIFEST_NAME}: not an archive of \`rapid models export\``);
  }
  if (m.format !== ARCHIVE_FORMAT) throw refused(file, `format "${String(m.format)}" is not ${ARCHIVE_FORMAT}`);
  if (typeof m.repo !== 'string' || !isRepoId(m.repo)) throw refused(file, `the manifest names no valid repo`);
  if (typeof m.commit !== 'string' || !COMMIT_RE.test(m.commit)) throw refused(file, 'the manifest names no valid commit');
  if (typeof m.revision !== 'string' || !m.revision.split('/').every((s) => s !== '' && s !== '.' && s !== '..')) throw refused(file, 'the manifest names no valid revision');
  if (!Array.isArray(m.files) || m.files.length === 0) throw refused(file, 'the manifest lists no files');
  for (const f of m.files) {
    if (typeof f.path !== 'string' || !isSafeRelativePath(f.path)) throw refused(file, `the manifest path "${String(f.path)}" points outside the model`);
    if (typeof f.etag !== 'string' || !/^([0-9a-f]{40}|[0-9a-f]{64})$/.test(f.etag)) throw refused(file, `${f.path} has no valid blob name`);
  }
  return m;
}

export async function importModel(archive: string, env: Env = process.env): Promise<ImportResult> {
  const file = resolve(archive);
  if (!existsSync(file)) throw new ModelError(`${archive}: no such file`);
  await checkEntries(file);
  const cacheDir = hubCacheDir(env);
  mkdirSync(cacheDir, { recursive: true });
  // Staged inside the cache: the blobs then move in by rename, on the same file system.
  const staging = mkdtempSync(join(cacheDir, '.rapid-import-'));
  // What this import created, removed again if it fails half-way (the repo, or a new snapshot of it).
  let createdRepo: string | undefined;
  let createdSnapshot: string | undefined;
  try {
    await extract({ file, cwd: staging, strict: true, preservePaths: false });
    const m = readManifest(archive, staging);
    const listed = new Set(m.files.map((f) => f.path));
    for (const f of m.files) {
      const staged = join(staging, FILES_DIR, ...f.path.split('/'));
      if (!existsSync(staged) || !lstatSync(staged).isFile()) throw refused(archive, `${f.path} is listed in the manifest but missing`);
      const h = await hashFile(staged, statSync(staged).size);
      if (h.size !== f.size || h.sha256 !== f.sha256) throw refused(archive, `${f.path} does not match its sha256 in the manifest (the archive was altered or damaged)`);
      if (!etagMatches(f.etag, h)) throw refused(archive, `${f.path} does not match its blob name ${f.etag}`);
    }
    const extra: string[] = [];
    await list({
      file,
      onReadEntry: (e) => {
        const p = e.path.replace(/\/$/, '');
        if (e.type === 'File' && p.startsWith(`${FILES_DIR}/`) && !listed.has(p.slice(FILES_DIR.length + 1))) extra.push(p);
      },
    });
    if (extra.length > 0) throw refused(archive, `${extra[0]} is not in the manifest`);
    // Verified: install. Blobs already in the cache (same content, same name) are kept.
    const repoFolder = repoDir(cacheDir, m.repo);
    if (!existsSync(repoFolder)) createdRepo = repoFolder;
    else if (!existsSync(snapshotDir(cacheDir, m.repo, m.commit))) createdSnapshot = snapshotDir(cacheDir, m.repo, m.commit);
    let bytes = 0;
    for (const f of m.files) {
      const blob = blobPath(cacheDir, m.repo, f.etag);
      mkdirSync(join(repoFolder, 'blobs'), { recursive: true });
      if (!existsSync(blob)) renameSync(join(staging, FILES_DIR, ...f.path.split('/')), blob);
      linkSnapshotFile(cacheDir, m.repo, m.commit, f.path, f.etag);
      bytes += f.size;
    }
    writeRef(cacheDir, m.repo, m.revision, m.commit);
    return { repo: m.repo, revision: m.revision, commit: m.commit, dir: snapshotDir(cacheDir, m.repo, m.commit), files: m.files.length, bytes };
  } catch (err) {
    if (createdRepo !== undefined) rmSync(createdRepo, { recursive: true, force: true });
    if (createdSnapshot !== undefined) rmSync(createdSnapshot, { recursive: true, force: true });
    if (err instanceof ModelError) throw err;
    throw refused(archive, (err as Error).message);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
