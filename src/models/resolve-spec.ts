// Turns what a user typed into a model reference, in this order: local path, retired alias,
// user alias, `org/name[@revision]` repo, built-in alias. Nothing here touches the network.
import { existsSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { catalogNames, findAlias, findRepo, loadCatalog, type CatalogEntry } from './catalog.js';
import { embeddedModelDir } from './default-model.js';
import { suggest } from './did-you-mean.js';
import { ModelNotFoundError, RetiredModelError } from './errors.js';
import { listCachedRepos } from './hf-cache.js';
import { hubCacheDir, type Env } from './hub-env.js';
import { readUserAliases, userAliasesPath } from './user-aliases.js';

export type ModelRef =
  | { kind: 'local'; spec: string; dir: string; via: 'path' | 'user-alias' | 'embedded'; entry?: CatalogEntry }
  | {
      kind: 'repo';
      spec: string;
      repo: string;
      revision: string;
      entry?: CatalogEntry; // the catalog entry for this repo, when there is one
      via: 'alias' | 'repo' | 'user-alias';
      warnings: string[];
    };

const REPO_RE = /^[A-Za-z0-9][\w.-]{0,95}\/[A-Za-z0-9][\w.-]{0,95}$/;

export function isRepoId(s: string): boolean {
  return REPO_RE.test(s) && !s.includes('--') && !s.includes('..');
}

function looksLikePath(spec: string): boolean {
  return isAbsolute(spec) || /^(\.{1,2}|~)([\\/]|$)/.test(spec) || spec.includes('\\');
}

function expandHome(spec: string): string {
  return spec === '~' || spec.startsWith('~/') ? homedir() + spec.slice(1) : spec;
}

function splitRevision(spec: string): { name: string; revision?: string } {
  const at = spec.lastIndexOf('@');
  if (at <= 0) return { name: spec };
  const revision = spec.slice(at + 1);
  return revision ? { name: spec.slice(0, at), revision } : { name: spec.slice(0, at) };
}

function retiredMessage(name: string, e: CatalogEntry): string {
  const instead = e.replacement ? ` Use ${e.replacement} instead: rapid models pull ${e.replacement}` : '';
  return `${name} is retired: ${e.reason ?? 'no longer supported'}.${instead}`;
}

function isRetiredAlias(name: string): CatalogEntry | undefined {
  const e = findAlias(name);
  return e?.status === 'retired' ? e : undefined;
}

function refFromRepo(spec: string, repo: string, revision: string | undefined, via: 'repo' | 'user-alias'): ModelRef {
  const entry = findRepo(repo);
  if (entry?.embedded) return embeddedRef(spec, entry, entry.embedded);
  const warnings: string[] = [];
  if (entry?.status === 'retired') warnings.push(retiredMessage(repo, entry));
  return { kind: 'repo', spec, repo: entry?.repo ?? repo, revision: revision ?? 'main', entry, via, warnings };
}

/** An embedded catalog entry: its folder inside the installed package, never downloaded. */
function embeddedRef(spec: string, entry: CatalogEntry, relative: string): ModelRef {
  const dir = embeddedModelDir(relative);
  if (!existsSync(dir)) throw new ModelNotFoundError(`${spec}: the embedded model is missing from this install (${dir})`);
  return { kind: 'local', spec, dir, via: 'embedded', entry };
}

function localRef(spec: string, path: string, via: 'path' | 'user-alias'): ModelRef {
  const dir = resolve(expandHome(path));
  if (!existsSync(dir)) throw new ModelNotFoundError(`${path}: no such directory`);
  if (!statSync(dir).isDirectory()) throw new ModelNotFoundError(`${path} is a file; give the model's directory (the one holding config.json)`);
  return { kind: 'local', spec, dir, via };
}

/** Resolves a user alias target: a path, a repo, or a built-in alias (never another user alias). */
function fromUserAlias(spec: string, name: string, target: string, revision: string | undefined, env: Env): ModelRef {
  if (looksLikePath(target)) return localRef(spec, target, 'user-alias');
  const t = splitRevision(target);
  const rev = revision ?? t.revision;
  const retired = isRetiredAlias(t.name);
  if (retired) throw new RetiredModelError(`user alias ${name} -> ${retiredMessage(t.name, retired)} (edit ${userAliasesPath(env)})`, retired.replacement);
  if (isRepoId(t.name)) return refFromRepo(spec, t.name, rev, 'user-alias');
  const entry = findAlias(t.name);
  if (entry) return { kind: 'repo', spec, repo: entry.repo, revision: rev ?? 'main', entry, via: 'user-alias', warnings: [] };
  throw new ModelNotFoundError(`user alias ${name} points at "${target}", which is neither a directory, an org/name repo nor a known alias (edit ${userAliasesPath(env)})`);
}

/** A pasted hub URL ("https://huggingface.co/org/name/tree/rev") becomes "org/name@rev". */
function fromHubUrl(spec: string): string {
  const m = /^(?:https?:\/\/)?(?:www\.)?(?:huggingface\.co|hf\.co)\/([^/?#]+\/[^/?#]+)(?:\/tree\/([^?#]+?))?\/?(?:[?#].*)?$/.exec(spec);
  if (!m) return spec;
  return m[2] ? `${m[1]}@${decodeURIComponent(m[2])}` : m[1];
}

export function resolveSpec(spec: string, env: Env = process.env): ModelRef {
  const input = fromHubUrl(spec.trim());
  if (!input) throw new ModelNotFoundError('no model given');

  // 1. Local path: anything that looks like one, or an existing directory of that name.
  if (looksLikePath(input) || (existsSync(input) && statSync(input).isDirectory())) return localRef(input, input, 'path');

  const { name, revision } = splitRevision(input);

  // 2. Retired alias: refused before anything else can shadow it.
  const retired = isRetiredAlias(name);
  if (retired) throw new RetiredModelError(retiredMessage(name, retired), retired.replacement);

  // 3. User alias.
  const user = readUserAliases(env);
  const userKey = Object.keys(user).find((k) => k.toLowerCase() === name.toLowerCase());
  if (userKey !== undefined) return fromUserAlias(input, userKey, user[userKey], revision, env);

  // 4. org/name repo.
  if (isRepoId(name)) return refFromRepo(input, name, revision, 'repo');

  // 5. Built-in alias.
  const entry = findAlias(name);
  if (entry?.embedded) return embeddedRef(input, entry, entry.embedded);
  if (entry) return { kind: 'repo', spec: input, repo: entry.repo, revision: revision ?? 'main', entry, via: 'alias', warnings: [] };

  throw notFound(name, user, env);
}

function notFound(name: string, user: Record<string, string>, env: Env): ModelNotFoundError {
  const retired = new Set(loadCatalog().filter((m) => m.status === 'retired').flatMap((m) => [m.alias, ...(m.aka ?? [])]));
  const names = [...catalogNames().filter((n) => !retired.has(n)), ...Object.keys(user)];
  // A bare repo name ("Qwen3-4B-4bit") is suggested with its org, from the catalog and the cache.
  const repos = [...loadCatalog().map((m) => m.repo)];
  try {
    repos.push(...listCachedRepos(hubCacheDir(env)).map((r) => r.repo));
  } catch {
    // an unreadable cache only costs suggestions
  }
  const exactRepo = repos.filter((r) => r.split('/')[1].toLowerCase() === name.toLowerCase());
  const suggestions = [...new Set([...exactRepo, ...suggest(name, names), ...suggest(name, repos, 2)])].slice(0, 4);
  const hint = suggestions.length ? ` Did you mean ${suggestions.join(', ')}?` : '';
  return new ModelNotFoundError(
    `unknown model "${name}": not a directory, an alias or an org/name repo.${hint} (\`rapid models\` lists the aliases)`,
    suggestions,
  );
}
