// The published tarball: its contents, and that it installs into an empty folder and runs.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), 'rapid-pack-'));
let tarball = '';
let files: string[] = [];

beforeAll(() => {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: root, encoding: 'utf8' });
  const info = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
  tarball = join(work, info[0].filename);
  files = info[0].files.map((f) => f.path);
}, 300_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('npm pack', () => {
  it('ships the CLI, compiled JS, native sources and the prebuild, and nothing from tests', () => {
    expect(files).toContain('bin/rapid.js');
    expect(files).toContain('dist/cli/index.js');
    expect(files).toContain('dist/vision/preprocess-worker.js'); // spawned by path, not imported
    expect(files).toContain('models/tiny-vlm/model.safetensors'); // the embedded default model
    expect(files).toContain('models/tiny-vlm/golden/golden.jsonl');
    expect(files).toContain('models/tiny-vlm-4bit/model.safetensors');
    expect(files).toContain('examples/shapes.png');
    expect(files).toContain('binding.gyp');
    expect(files).toContain('native/sources.cjs');
    expect(files.some((f) => f.startsWith('native/src/') && f.endsWith('.cpp'))).toBe(true);
    expect(files.some((f) => f.startsWith('test/'))).toBe(false);
    expect(files.some((f) => f.startsWith('build/'))).toBe(false);
    if (existsSync(join(root, 'prebuilds', `${process.platform}-${process.arch}`))) {
      expect(files.some((f) => f.startsWith(`prebuilds/${process.platform}-${process.arch}/`))).toBe(true);
    }
  });

  it('installs into an empty folder and `rapid --help` runs from there', () => {
    const app = join(work, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    const install = spawnSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball], {
      cwd: app,
      encoding: 'utf8',
      env: { ...process.env, npm_config_nodedir: process.env.npm_config_nodedir ?? '/usr' },
    });
    expect(install.status, install.stderr).toBe(0);
    const bin = join(app, 'node_modules', '.bin', 'rapid');
    const help = spawnSync(bin, ['--help'], { encoding: 'utf8' });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/Usage: rapid/);
    expect(help.stdout).toMatch(/run/);
    expect(help.stdout).toMatch(/convert/);

    // The installed package loads a native binary and says which one and why.
    const probe = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', "import('rapid-vlm').then(async m => console.log(JSON.stringify(await m.nativeInfo())))"],
      { cwd: app, encoding: 'utf8' },
    );
    expect(probe.status, probe.stderr).toBe(0);
    const info = JSON.parse(probe.stdout) as { path: string; source: string };
    const pkgDir = join(app, 'node_modules', 'rapid-vlm');
    expect(info.path.startsWith(pkgDir)).toBe(true);
    const hasPrebuild = existsSync(join(pkgDir, 'prebuilds', `${process.platform}-${process.arch}`)) &&
      readdirSync(join(pkgDir, 'prebuilds', `${process.platform}-${process.arch}`)).length > 0;
    expect(info.source).toBe(hasPrebuild ? 'prebuild' : 'build');

    // The image preprocessing worker resolves from the installed dist/ and gives the in-thread bytes.
    const pool = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { PreprocessPool } = await import('rapid-vlm/dist/vision/preprocess-pool.js');
         const { prepareWithSpec } = await import('rapid-vlm/dist/vision/prepare-image.js');
         const spec = { kind: 'gemma3', image: { height: 28, width: 28, patchSize: 14, tokens: 4, doResize: true, resample: 'bilinear',
           norm: { doRescale: true, rescaleFactor: 1 / 255, doNormalize: true, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] } } };
         const img = { width: 40, height: 30, data: Uint8Array.from({ length: 3600 }, (_, i) => (i * 7) % 256) };
         const p = new PreprocessPool({ threads: 1 });
         const off = await p.prepare(spec, img);
         await p.close();
         const ref = prepareWithSpec(spec, img);
         console.log(JSON.stringify({ same: Buffer.compare(Buffer.from(off.input.pixels.buffer), Buffer.from(ref.input.pixels.buffer)) === 0 }));`,
      ],
      { cwd: app, encoding: 'utf8' },
    );
    expect(pool.status, pool.stderr).toBe(0);
    expect(JSON.parse(pool.stdout)).toEqual({ same: true });
  }, 600_000);
});
