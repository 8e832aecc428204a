// The published tarball: its contents (the CPU prebuilds, no CUDA binary), and that it installs with
// `npm install -g` into an empty prefix on a PATH without a compiler (no python3, make or g++: the
// prebuild must load, nothing may compile) and runs `rapid run` on the embedded default model; the
// CUDA package installed beside it is found.
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, cpSync, existsSync, mkdirSync, mkdtempSync, openSync, readSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), 'rapid-pack-'));
const tuple = `${process.platform}-${process.arch}`;
// scripts/prebuild.mjs cross-compiles linux-arm64 on linux-x64 wherever Debian's aarch64 toolchain is installed.
const crossBuildsArm64 = tuple === 'linux-x64' && spawnSync('aarch64-linux-gnu-g++', ['--version']).status === 0;
const ELF_MACHINE: Record<string, number> = { x64: 62, arm64: 183 };
let tarball = '';
let files: string[] = [];

beforeAll(() => {
  // Scripts off: CI compiled dist/ already (npm ci runs prepare), and a compile here would rewrite
  // dist/ under the other test files that run from it.
  const out = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: root, encoding: 'utf8' });
  const info = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
  tarball = join(work, info[0].filename);
  files = info[0].files.map((f) => f.path);
}, 300_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The ELF e_machine of a binary (62 x86-64, 183 AArch64). */
function elfMachine(path: string): number {
  const b = Buffer.alloc(20);
  const fd = openSync(path, 'r');
  readSync(fd, b, 0, 20, 0);
  closeSync(fd);
  expect(b.subarray(0, 4).toString('latin1')).toBe('\x7fELF');
  return b.readUInt16LE(18);
}

/** A bin folder with node, npm and sh only: no python3, make, cc or g++ to build an addon with. */
function noCompilerPath(): string {
  const bin = join(work, 'bin');
  mkdirSync(bin, { recursive: true });
  const npmCli = realpathSync(execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim());
  for (const [name, target] of [['node', process.execPath], ['npm', npmCli], ['sh', '/bin/sh']]) symlinkSync(target, join(bin, name));
  return bin;
}

describe('npm pack', () => {
  it('ships the CLI, compiled JS, native sources and the prebuild, and nothing from tests', () => {
    expect(files).toContain('bin/rapid.js');
    expect(files).toContain('dist/cli/index.js');
    expect(files).toContain('dist/vision/preprocess-worker.js'); // spawned by path, not imported
    expect(files).toContain('dist/engine-host/child.js'); // forked by path (--engine-process child)
    expect(files).toContain('models/tiny-vlm/model.safetensors'); // the embedded default model
    expect(files).toContain('models/tiny-vlm/golden/golden.jsonl');
    expect(files).toContain('models/tiny-vlm-4bit/model.safetensors');
    expect(files).toContain('examples/shapes.png');
    expect(files).toContain('binding.gyp');
    expect(files).toContain('native/sources.cjs');
    expect(files.some((f) => f.startsWith('native/src/') && f.endsWith('.cpp'))).toBe(true);
    expect(files.some((f) => f.startsWith('test/'))).toBe(false);
    expect(files.some((f) => f.startsWith('build/'))).toBe(false);
  });

  it('ships the CPU prebuilds for this platform and, cross-compiled, linux-arm64; the CUDA build is its own package', () => {
    const host = `prebuilds/${tuple}/rapid-vlm.glibc.node`;
    expect(files, `no ${host}: run \`npm run prebuild\` first (CI does)`).toContain(host);
    expect(elfMachine(join(root, host))).toBe(ELF_MACHINE[process.arch]);
    if (crossBuildsArm64) {
      expect(files).toContain('prebuilds/linux-arm64/rapid-vlm.glibc.node');
      expect(elfMachine(join(root, 'prebuilds', 'linux-arm64', 'rapid-vlm.glibc.node'))).toBe(ELF_MACHINE.arm64);
    }
    expect(files.filter((f) => /cuda/i.test(f) && f.endsWith('.node'))).toEqual([]);
    expect(files.some((f) => f.startsWith('packages/'))).toBe(false);
  });

  it('installs with `npm install -g` into an empty prefix without a compiler, loads the prebuild and runs', () => {
    const prefix = join(work, 'prefix');
    const PATH = noCompilerPath();
    const env = { ...process.env, PATH };
    for (const tool of ['g++', 'cc', 'make', 'python3']) expect(spawnSync(tool, ['--version'], { env }).error, `${tool} is reachable`).toBeDefined();
    const install = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', tarball], { encoding: 'utf8', env });
    expect(install.status, install.stdout + install.stderr).toBe(0);
    const pkgDir = join(prefix, 'lib', 'node_modules', 'rapid-vlm');
    expect(existsSync(join(pkgDir, 'build')), 'the install compiled the addon').toBe(false);
    const bin = join(prefix, 'bin', 'rapid');
    const help = spawnSync(bin, ['--help'], { encoding: 'utf8', env });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/Usage: rapid/);
    expect(help.stdout).toMatch(/run/);
    expect(help.stdout).toMatch(/convert/);

    // The default model (embedded in the package) answers, on the prebuilt CPU addon.
    const run = spawnSync(bin, ['run', '--prompt', 'hi', '--max-tokens', '8', '--json'], { encoding: 'utf8', env, timeout: 240_000 });
    expect(run.status, run.stderr).toBe(0);
    const reply = JSON.parse(run.stdout) as { text: string; usage: { completion_tokens: number } };
    expect(reply.usage.completion_tokens).toBeGreaterThan(0);

    // The installed package loads a native binary and says which one and why: the prebuild.
    const app = join(prefix, 'lib');
    const probe = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', "import('rapid-vlm').then(async m => console.log(JSON.stringify(await m.nativeInfo())))"],
      { cwd: app, encoding: 'utf8', env },
    );
    expect(probe.status, probe.stderr).toBe(0);
    const info = JSON.parse(probe.stdout) as { path: string; source: string };
    expect(info.path).toBe(join(pkgDir, 'prebuilds', tuple, 'rapid-vlm.glibc.node'));
    expect(info.source).toBe('prebuild');

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
      { cwd: app, encoding: 'utf8', env },
    );
    expect(pool.status, pool.stderr).toBe(0);
    expect(JSON.parse(pool.stdout)).toEqual({ same: true });

    // The CUDA package installed beside it is where rapid looks for the CUDA build. A copy of the CPU
    // prebuild stands in for the CUDA binary (building that needs nvcc); no GPU here, so the plan lists
    // it after the CPU build.
    if (tuple !== 'linux-x64') return;
    const cudaPkg = join(work, 'cuda-pkg');
    cpSync(join(root, 'packages', 'rapid-vlm-cuda-linux-x64'), cudaPkg, { recursive: true });
    cpSync(join(pkgDir, 'prebuilds', tuple, 'rapid-vlm.glibc.node'), join(cudaPkg, 'rapid-vlm.glibc.node'));
    const cudaTgz = join(work, JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: cudaPkg, encoding: 'utf8', env }))[0].filename);
    const cudaInstall = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', cudaTgz], { encoding: 'utf8', env });
    expect(cudaInstall.status, cudaInstall.stderr).toBe(0);
    const plan = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', "import('rapid-vlm/dist/native/binding.js').then(m => console.log(JSON.stringify(m.planNative({ device: 'auto', env: {} }).candidates)))"],
      { cwd: app, encoding: 'utf8', env },
    );
    expect(plan.status, plan.stderr).toBe(0);
    expect(JSON.parse(plan.stdout)).toContainEqual({ path: join(prefix, 'lib', 'node_modules', 'rapid-vlm-cuda-linux-x64', 'rapid-vlm.glibc.node'), source: 'prebuild', variant: 'cuda' });
  }, 600_000);
});
