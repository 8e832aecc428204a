// `models` listing: the catalog joined with what the HF cache holds, plus cached repos that are
// not in the catalog (downloaded by rapid from an org/name, or by other tools).
import { findRepo, loadCatalog, type CatalogEntry, type Modality, type ModelStatus } from './catalog.js';
import { missingLocalFiles } from './file-selection.js';
import { listCachedRepos, type CachedRepo } from './hf-cache.js';
import { hubCacheDir, type Env } from './hub-env.js';

export interface DownloadedState {
  dir: string; // the snapshot used (the one refs/main points at, else the newest)
  commit: string;
  sizeBytes: number; // on disk, all revisions
  complete: boolean; // has everything rapid needs
  incompleteBytes: number; // bytes in interrupted downloads
}

export interface ListedModel {
  alias?: string;
  repo: string;
  status?: ModelStatus;
  modalities?: Modality[];
  params?: string;
  quantization?: string;
  sizeBytes?: number; // catalog's approximate download size
  description?: string;
  embedded?: boolean; // ships inside the package: nothing to download
  downloaded?: DownloadedState;
}

export interface ModelListing {
  cacheDir: string;
  catalog: ListedModel[];
  other: ListedModel[]; // in the cache, not in the catalog
}

function downloadedState(r: CachedRepo): DownloadedState | undefined {
  if (!r.snapshots.length) {
    return r.incomplete.length
      ? { dir: '', commit: '', sizeBytes: r.sizeBytes, complete: false, incompleteBytes: r.incomplete.reduce((a, b) => a + b.sizeBytes, 0) }
      : undefined;
  }
  const main = r.snapshots.find((s) => s.refs.includes('main'));
  const snap = main ?? [...r.snapshots].sort((a, b) => b.files.length - a.files.length)[0];
  return {
    dir: snap.dir,
    commit: snap.commit,
    sizeBytes: r.sizeBytes,
    complete: missingLocalFiles(snap.dir).length === 0,
    incompleteBytes: r.incomplete.reduce((a, b) => a + b.sizeBytes, 0),
  };
}

function fromEntry(e: CatalogEntry): ListedModel {
  return {
    alias: e.alias,
    repo: e.repo,
    status: e.status,
    modalities: e.modalities,
    params: e.params,
    quantization: e.quantization,
    sizeBytes: e.sizeBytes,
    description: e.description,
    ...(e.embedded ? { embedded: true } : {}),
  };
}

export function listModels(opts: { env?: Env; all?: boolean } = {}): ModelListing {
  const cacheDir = hubCacheDir(opts.env ?? process.env);
  const cached = listCachedRepos(cacheDir);
  const byRepo = new Map(cached.map((r) => [r.repo.toLowerCase(), r]));
  const catalog = loadCatalog()
    .filter((e) => opts.all || e.status !== 'retired' || byRepo.has(e.repo.toLowerCase()))
    .map((e) => {
      const r = byRepo.get(e.repo.toLowerCase());
      return { ...fromEntry(e), downloaded: r ? downloadedState(r) : undefined };
    });
  const other = cached
    .filter((r) => !findRepo(r.repo))
    .map((r) => ({ repo: r.repo, downloaded: downloadedState(r) }))
    .filter((m) => m.downloaded !== undefined);
  return { cacheDir, catalog, other };
}
