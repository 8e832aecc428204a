// Spec resolution: local path, retired alias, user alias, org/name, built-in alias, did-you-mean,
// planned models refused by run/serve, and reuse of models other HF tools downloaded.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadCatalog, type CatalogEntry } from '../../src/models/catalog.js';
import { editDistance, suggest } from '../../src/models/did-you-mean.js';
import { ModelError, ModelNotFoundError, PlannedModelError, RetiredModelError } from '../../src/models/errors.js';
import { hubCacheDir, type Env } from '../../src/models/hub-env.js';
import { resolveModel, resolveModelDetailed } from '../../src/models/resolve-model.js';
import { resolveSpec } from '../../src/models/resolve-spec.js';

let tmp: string;
let env: Env;

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-resolve-'));
  // An endpoint nothing listens on: any network use would fail loudly.
  env = { HOME: tmp, HF_HOME: join(tmp, 'hf'), XDG_CONFIG_HOME: join(tmp, 'config'), HF_ENDPOINT: 'http://127.0.0.1:9' };
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

function userAliases(map: Record<string, string>): void {
  mkdirSync(join(tmp, 'config', 'rapid'), { recursive: true });
  writeFileSync(join(tmp, 'config', 'rapid', 'aliases.json'), JSON.stringify(map));
}

/** Lays out a model the way huggingface_hub would have downloaded it. */
function fakeHfDownload(repo: string, commit = 'a'.repeat(40)): string {
  const root = join(hubCacheDir(env), `models--${repo.replace('/', '--')}`);
  const snap = join(root, 'snapshots', commit);
  mkdirSync(join(root, 'blobs'), { recursive: true });
  mkdirSync(snap, { recursive: true });
  mkdirSync(join(root, 'refs'), { recursive: true });
  writeFileSync(join(root, 'refs', 'main'), commit);
  for (const [i, name] of ['config.json', 'tokenizer.json', 'model.safetensors'].entries()) {
    writeFileSync(join(root, 'blobs', `blob${i}`), name === 'config.json' ? '{"architectures":["Qwen2ForCausalLM"]}' : 'x');
    symlinkSync(join('..', '..', 'blobs', `blob${i}`), join(snap, name));
  }
  return snap;
}

describe('catalog', () => {
  it('is consistent: unique aliases, replacements exist, the vision families rapid runs are supported', () => {
    const cat = loadCatalog();
    const aliases = new Set(cat.map((m) => m.alias));
    for (const m of cat) {
      if (m.replacement) expect(aliases.has(m.replacement), `${m.alias} -> ${m.replacement}`).toBe(true);
      expect(m.sizeBytes).toBeGreaterThan(0);
    }
    for (const a of ['gemma-3-4b-4bit', 'gemma-3-12b-4bit', 'qwen2.5-vl-3b-4bit', 'qwen2.5-vl-7b-4bit', 'qwen3-vl-4b-4bit', 'qwen3-vl-8b-4bit']) {
      expect(cat.find((m) => m.alias === a), a).toMatchObject({ status: 'supported', modalities: ['text', 'image'] });
    }
  });
});

describe('resolveSpec', () => {
  it('resolves built-in aliases (case-insensitive) and their alternatives', () => {
    const ref = resolveSpec('Qwen2.5-0.5B-4bit', env);
    expect(ref).toMatchObject({ kind: 'repo', repo: 'mlx-community/Qwen2.5-0.5B-Instruct-4bit', revision: 'main', via: 'alias' });
    expect(resolveSpec('qwen3', env)).toMatchObject({ repo: 'mlx-community/Qwen3-0.6B-4bit' });
  });

  it('accepts pasted hub URLs', () => {
    expect(resolveSpec('https://huggingface.co/someone/model-x', env)).toMatchObject({ repo: 'someone/model-x', revision: 'main' });
    expect(resolveSpec('hf.co/someone/model-x/tree/v1.0/', env)).toMatchObject({ repo: 'someone/model-x', revision: 'v1.0' });
  });

  it('takes org/name[@revision] repos as they are', () => {
    expect(resolveSpec('someone/model-x@v2', env)).toMatchObject({ kind: 'repo', repo: 'someone/model-x', revision: 'v2', via: 'repo' });
    // A repo of a catalog entry carries the entry (recommended sampling, status).
    const ref = resolveSpec('mlx-community/qwen3-4b-4bit', env);
    expect(ref.kind === 'repo' && ref.entry?.alias).toBe('qwen3-4b-4bit');
  });

  it('prefers a local path over everything', () => {
    const dir = join(tmp, 'qwen3');
    mkdirSync(dir);
    expect(resolveSpec(dir, env)).toMatchObject({ kind: 'local', dir });
    expect(() => resolveSpec(join(tmp, 'missing'), env)).toThrow(/no such directory/);
  });

  it('refuses retired aliases with the reason and the replacement, before user aliases', () => {
    userAliases({ 'gemma-2-2b': 'someone/else' });
    const err = (() => {
      try {
        resolveSpec('gemma-2-2b', env);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(RetiredModelError);
    expect((err as RetiredModelError).replacement).toBe('gemma-3-1b-4bit');
    expect((err as Error).message).toMatch(/gemma-2-2b is retired: .*soft-capping.*Use gemma-3-1b-4bit instead/);
  });

  it('warns (not fails) for the repo of a retired alias named explicitly', () => {
    const ref = resolveSpec('mlx-community/Qwen2-0.5B-Instruct-4bit', env);
    expect(ref.kind === 'repo' && ref.warnings[0]).toMatch(/retired/);
  });

  it('user aliases come before repos and built-ins, and can point at paths, repos or aliases', () => {
    const dir = join(tmp, 'mine');
    mkdirSync(dir);
    userAliases({ mine: dir, coder: 'mlx-community/Qwen2.5-Coder-1.5B-Instruct-4bit@abc', 'qwen3-4b-4bit': 'llama-3.2-1b' });
    expect(resolveSpec('mine', env)).toMatchObject({ kind: 'local', dir, via: 'user-alias' });
    expect(resolveSpec('coder', env)).toMatchObject({ repo: 'mlx-community/Qwen2.5-Coder-1.5B-Instruct-4bit', revision: 'abc', via: 'user-alias' });
    expect(resolveSpec('qwen3-4b-4bit', env)).toMatchObject({ repo: 'mlx-community/Llama-3.2-1B-Instruct-4bit' });
  });

  it('reports a broken aliases file and dangling user aliases clearly', () => {
    userAliases({ bad: 'not-a-thing' });
    expect(() => resolveSpec('bad', env)).toThrow(/user alias bad points at "not-a-thing"/);
    mkdirSync(join(tmp, 'config', 'rapid'), { recursive: true });
    writeFileSync(join(tmp, 'config', 'rapid', 'aliases.json'), '{oops');
    expect(() => resolveSpec('x', env)).toThrow(/aliases\.json is not valid JSON/);
  });

  it('suggests the nearest names for typos', () => {
    const err = (() => {
      try {
        resolveSpec('qwen2.5-0.5b-4bti', env);
      } catch (e) {
        return e;
      }
    })() as ModelNotFoundError;
    expect(err).toBeInstanceOf(ModelNotFoundError);
    expect(err.suggestions[0]).toBe('qwen2.5-0.5b-4bit');
    expect(err.message).toMatch(/Did you mean qwen2\.5-0\.5b-4bit/);
    expect(() => resolveSpec('lama-3.2-1b', env)).toThrow(/Did you mean llama-3\.2-1b/);
    // A bare repo name is suggested with its org.
    expect(() => resolveSpec('Llama-3.2-1B-Instruct-4bit', env)).toThrow(/Did you mean mlx-community\/Llama-3\.2-1B-Instruct-4bit/);
  });

  it('edit distance handles transpositions', () => {
    expect(editDistance('4bti', '4bit')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
    expect(suggest('zzzzzzzz', ['qwen3'])).toEqual([]);
  });
});

describe('resolveModel', () => {
  // A planned entry (listed, its runtime not in rapid yet). The shipped catalog may have none at a given time, so
  // the test adds one to the loaded catalog for its duration.
  it('refuses planned models before any download, naming what to use now', async () => {
    const catalog = loadCatalog();
    const planned: CatalogEntry = {
      alias: 'test-planned-7b-4bit', repo: 'example-org/Test-Planned-7B-4bit', family: 'qwen2', params: '7B',
      modalities: ['text'], quantization: '4-bit', sizeBytes: 4e9, contextLength: 32768, status: 'planned',
      reason: 'its runtime is being written', replacement: 'qwen2.5-7b-4bit', description: 'a planned test entry',
    };
    catalog.push(planned);
    try {
      const err = await resolveModel(planned.alias, { pull: true, env }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PlannedModelError);
      expect((err as Error).message).toContain(`planned, not runnable yet: ${planned.reason}`);
      expect((err as Error).message).toContain(`Use ${planned.replacement} now`);
      await expect(resolveModel(planned.repo, { pull: true, env })).rejects.toThrow(PlannedModelError);
    } finally {
      catalog.splice(catalog.indexOf(planned), 1);
    }
  });

  it('refuses retired aliases before any download', async () => {
    await expect(resolveModel('qwen2-0.5b', { pull: true, env })).rejects.toThrow(RetiredModelError);
  });

  it('reuses a model another HF tool downloaded, without the network', async () => {
    const snap = fakeHfDownload('mlx-community/Qwen2.5-0.5B-Instruct-4bit');
    const r = await resolveModelDetailed('qwen2.5-0.5b', { pull: true, env });
    expect(r).toMatchObject({ dir: snap, source: 'cache' });
    expect(r.entry?.sampling?.topK).toBe(20);
  });

  it('honours HF_HOME for the cache location', async () => {
    env.HF_HOME = join(tmp, 'custom-home');
    const snap = fakeHfDownload('someone/model');
    expect(snap.startsWith(join(tmp, 'custom-home', 'hub'))).toBe(true);
    expect(await resolveModel('someone/model', { pull: false, env })).toBe(snap);
  });

  it('without pull, a missing model says how to get it', async () => {
    await expect(resolveModel('qwen3-0.6b', { pull: false, env })).rejects.toThrow(/not downloaded\. Run: rapid models pull qwen3-0\.6b/);
  });

  it('a local directory must hold config, tokenizer and weights', async () => {
    const dir = join(tmp, 'partial');
    mkdirSync(dir);
    writeFileSync(join(dir, 'config.json'), '{}');
    await expect(resolveModel(dir, { pull: true, env })).rejects.toThrow(ModelError);
    await expect(resolveModel(dir, { pull: true, env })).rejects.toThrow(/lacks tokenizer\.json, \*\.safetensors weights/);
    writeFileSync(join(dir, 'tokenizer.json'), '{}');
    writeFileSync(join(dir, 'model.safetensors'), '');
    expect(await resolveModel(dir, { pull: true, env })).toBe(dir);
  });
});
