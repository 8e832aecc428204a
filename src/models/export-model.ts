// `rapid models export NAME FILE.tar`: a downloaded model as one tar for a machine without network,
// with every file's sha256 in the manifest (import checks them all before it installs anything).
import { mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create } from 'tar';
import { ModelError } from './errors.js';
import { cachedSnapshot, readRef, snapshotFileEtag } from './hf-cache.js';
import { hubCacheDir, type Env } from './hub-env.js';
import { ARCHIVE_FORMAT, etagMatches, FILES_DIR, hashFile, MANIFEST_NAME, type ArchivedFile, type ArchiveManifest } from './model-archive.js';
import { resolveSpec } from './resolve-spec.js';

function snapshotFiles(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const rel = prefix ? `${prefix}/${name}` : name;
    if (statSync(join(dir, name)).isDirectory()) out.push(...snapshotFiles(join(dir, name), rel));
    else out.push(rel);
  }
  return out;
}

export interface ExportResult {
  repo: string;
  commit: string;
  file: string;
  files: number;
  bytes: number;
}

export async function exportModel(spec: string, file: string, env: Env = process.env): Promise<ExportResult> {
  const ref = resolveSpec(spec, env);
  if (ref.kind !== 'repo') throw new ModelError(`${spec} is a local directory (${ref.dir}): copy the directory itself; export moves models of the download cache`);
  const cacheDir = hubCacheDir(env);
  const snapshot = cachedSnapshot(cacheDir, ref.repo, ref.revision);
  const commit = readRef(cacheDir, ref.repo, ref.revision);
  if (!snapshot || !commit) throw new ModelError(`${spec} is not downloaded: \`rapid models pull ${spec}\` first`);
  const files: ArchivedFile[] = [];
  for (const path of snapshotFiles(snapshot)) {
    const full = join(snapshot, ...path.split('/'));
    const h = await hashFile(full, statSync(full).size);
    // The cache names blobs by content: a blob that no longer matches its name is refused here,
    // not discovered on the offline machine.
    const etag = snapshotFileEtag(full) ?? h.sha256;
    if (!etagMatches(etag, h)) throw new ModelError(`${ref.repo}: ${path} does not match its cache hash (the download is damaged): \`rapid models rm ${spec}\` and pull it again`);
    files.push({ path, size: h.size, sha256: h.sha256, etag });
  }
  const manifest: ArchiveManifest = { format: ARCHIVE_FORMAT, repo: ref.repo, revision: ref.revision, commit, files };
  // Staging: the manifest beside a link to the snapshot; tar follows the links (the blobs' bytes).
  const staging = mkdtempSync(join(tmpdir(), 'rapid-export-'));
  try {
    writeFileSync(join(staging, MANIFEST_NAME), `${JSON.stringify(manifest, null, 2)}\n`);
    symlinkSync(snapshot, join(staging, FILES_DIR));
    await create({ file: resolve(file), cwd: staging, follow: true, portable: true }, [MANIFEST_NAME, FILES_DIR]);
  } catch (err) {
    rmSync(resolve(file), { force: true }); // no half-written archive left behind
    throw err;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return { repo: ref.repo, commit, file: resolve(file), files: files.length, bytes: files.reduce((n, f) => n + f.size, 0) };
}
