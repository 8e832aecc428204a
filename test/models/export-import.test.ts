// `rapid models export` / `import` through the CLI: a model pulled into one cache moves as a tar
// into another (offline) where `rapid models` lists it and `rapid run` answers with it; tampered
// archives, path traversal and links are refused and leave the target cache untouched.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hubEnv } from '../../src/models/hub-env.js';
import { pullRepo } from '../../src/models/pull.js';
import { FakeHub, fakeFile, type FakeFile } from '../helpers/fake-hub.js';

const root = resolve(import.meta.dirname, '..', '..');
const REPO = 'test-org/tiny-vlm';
let hub: FakeHub;
let tmp: string;
let archive: string;

interface Run {
  code: number | null;
  out: string;
  err: string;
}

/** The CLI in a child process (the fake hub answers from this one, so not spawnSync). */
function rapid(args: string[], hfHome: string, extra: Record<string, string> = {}): Promise<Run> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [join(root, 'bin', 'rapid.js'), ...args], {
      cwd: tmp,
      env: { PATH: process.env.PATH, HOME: tmp, HF_HOME: hfHome, HF_HUB_OFFLINE: '1', XDG_CONFIG_HOME: join(tmp, 'config'), ...extra },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('close', (code) => done({ code, out, err }));
  });
}

/** The embedded tiny VLM's files, as a hub repo (safetensors as LFS). */
function tinyVlmRepo(): Map<string, FakeFile> {
  const dir = join(root, 'models', 'tiny-vlm');
  const files = new Map<string, FakeFile>();
  // The model's files only: not its README nor the evaluation sets (golden/, independent/).
  for (const name of readdirSync(dir, { withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name)) {
    if (name === 'README.md') continue;
    files.set(name, fakeFile(readFileSync(join(dir, name)), name.endsWith('.safetensors')));
  }
  return files;
}

const repoFolder = (hfHome: string) => join(hfHome, 'hub', 'models--test-org--tiny-vlm');

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-export-'));
  hub = new FakeHub();
  await hub.start();
  hub.addRepo(REPO, tinyVlmRepo());
  await pullRepo(REPO, { hub: hubEnv({ HOME: tmp, HF_HOME: join(tmp, 'online'), HF_ENDPOINT: hub.url }), retries: 1, retryBaseMs: 5 });
  archive = join(tmp, 'tiny-vlm.tar');
  const r = await rapid(['models', 'export', REPO, archive], join(tmp, 'online'));
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  expect(r.out).toMatch(/exported test-org\/tiny-vlm \(commit [0-9a-f]{12}, 7 files, .*\) to /);
});
afterAll(async () => {
  await hub.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe('rapid models export / import', () => {
  it('moves a model to an offline cache where models lists it and run answers with it', async () => {
    const offline = join(tmp, 'offline');
    const imp = await rapid(['models', 'import', archive], offline);
    expect(imp.code).toBe(0);
    expect(imp.out).toMatch(/imported test-org\/tiny-vlm .* into .*snapshots\/[0-9a-f]{40}/);
    const listing = JSON.parse((await rapid(['models', '--json'], offline)).out) as { other: { repo: string; downloaded?: { complete: boolean } }[] };
    expect(listing.other.find((m) => m.repo === REPO)?.downloaded?.complete).toBe(true);
    const run = await rapid(['run', REPO, '--prompt', 'Hello', '--temperature', '0', '--threads', '1', '-n', '16'], offline);
    expect(run.err).toBe('');
    expect(run.code).toBe(0);
    expect(run.out).toMatch(/Send me an image/);
    // Same cache layout as a pull: blobs named by content, relative links in the snapshot.
    const online = readdirSync(join(repoFolder(join(tmp, 'online')), 'blobs')).sort();
    expect(readdirSync(join(repoFolder(offline), 'blobs')).sort()).toEqual(online);
    // Importing again is a no-op that still succeeds.
    expect((await rapid(['models', 'import', archive], offline)).code).toBe(0);
  });

  it('refuses a tampered archive and leaves the cache untouched', async () => {
    const bytes = readFileSync(archive);
    const at = bytes.indexOf(Buffer.from('"rms_norm_eps"'));
    expect(at).toBeGreaterThan(0);
    bytes[at + 2] = 'X'.charCodeAt(0); // config.json's bytes change; its manifest sha256 does not
    const tampered = join(tmp, 'tampered.tar');
    writeFileSync(tampered, bytes);
    const target = join(tmp, 'tampered-target');
    const r = await rapid(['models', 'import', tampered], target);
    expect(r.code).not.toBe(0);
    expect(r.err).toMatch(/refused: config\.json does not match its sha256 in the manifest .*nothing was imported/);
    expect(existsSync(repoFolder(target))).toBe(false);
    expect(readdirSync(join(target, 'hub'))).toEqual([]); // no staging left behind
  });

  it('refuses path traversal and links before writing anything', async () => {
    const src = join(tmp, 'evil-src');
    mkdirSync(join(src, 'files'), { recursive: true });
    writeFileSync(join(src, 'rapid-model.json'), '{}');
    writeFileSync(join(tmp, 'outside.txt'), 'pwned');
    symlinkSync('/etc/passwd', join(src, 'files', 'config.json'));
    const traversal = join(tmp, 'traversal.tar');
    // GNU tar with -P keeps "../" in the name, as a hostile archive would.
    expect(spawnSync('tar', ['-cPf', traversal, '-C', src, 'rapid-model.json', '../outside.txt']).status).toBe(0);
    const linked = join(tmp, 'linked.tar');
    expect(spawnSync('tar', ['-cf', linked, '-C', src, 'rapid-model.json', 'files']).status).toBe(0);
    const target = join(tmp, 'evil-target');
    const a = await rapid(['models', 'import', traversal], target);
    expect(a.code).not.toBe(0);
    expect(a.err).toMatch(/refused: entry "\.\.\/outside\.txt" points outside the archive/);
    const b = await rapid(['models', 'import', linked], target);
    expect(b.code).not.toBe(0);
    expect(b.err).toMatch(/refused: entry "files\/config\.json" is a SymbolicLink, not a plain file/);
    expect(existsSync(join(target, 'hub'))).toBe(false);
    expect(existsSync(join(target, 'outside.txt'))).toBe(false);
  });

  it('says what to do for a model that is not downloaded', async () => {
    const r = await rapid(['models', 'export', 'test-org/absent', join(tmp, 'x.tar')], join(tmp, 'online'));
    expect(r.code).not.toBe(0);
    expect(r.err).toMatch(/test-org\/absent is not downloaded: `rapid models pull test-org\/absent` first/);
    expect(existsSync(join(tmp, 'x.tar'))).toBe(false);
  });
});
