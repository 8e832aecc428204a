// CPU vs CUDA addon variant selection: candidate order per device request, the driver probe,
// RAPID_DEVICE and --device, CUDA load failures falling back to the CPU build (auto) or failing
// with what is missing (cuda). Fake package roots, fake addons and fake driver files: no GPU needed.
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { cudaPackageName, loadNativeFrom, NATIVE_ABI, nvidiaDriverPresent, parseDevice, planNative, resolveDevice } from '../../src/native/binding.js';
import { H200, writeFakeAddon } from '../helpers/fake-addon.js';

const tuple = `${process.platform}-${process.arch}`;
const require = createRequire(import.meta.url);
let tmp = '';
let driver = ''; // a file standing in for /proc/driver/nvidia/version
let noDriver = '';

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-variant-'));
  driver = join(tmp, 'nvidia-version');
  writeFileSync(driver, 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06\n');
  noDriver = join(tmp, 'no-such-driver');
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

/** A package root with empty (unloadable) binaries at the given relative paths. */
function fakeRoot(files: string[]): string {
  const root = join(tmp, 'pkg');
  for (const f of files) {
    mkdirSync(join(root, f, '..'), { recursive: true });
    writeFileSync(join(root, f), f.endsWith('package.json') ? '{}' : 'not an ELF file');
  }
  mkdirSync(root, { recursive: true });
  return root;
}

const cudaInfo = { compiled: true, devices: [H200], driverVersion: '12.8', runtimeVersion: '13.0' };

describe('device request', () => {
  it('--device wins over RAPID_DEVICE, which wins over auto; bad values name their source', () => {
    expect(resolveDevice(undefined, {})).toBe('auto');
    expect(resolveDevice(undefined, { RAPID_DEVICE: 'cpu' })).toBe('cpu');
    expect(resolveDevice(undefined, { RAPID_DEVICE: '' })).toBe('auto');
    expect(resolveDevice('cuda', { RAPID_DEVICE: 'cpu' })).toBe('cuda');
    expect(resolveDevice(' CUDA ', {})).toBe('cuda');
    expect(() => resolveDevice('gpu', {})).toThrow('--device must be auto, cpu or cuda, got "gpu"');
    expect(() => resolveDevice(undefined, { RAPID_DEVICE: 'metal' })).toThrow('RAPID_DEVICE must be auto, cpu or cuda, got "metal"');
    expect(parseDevice('auto')).toBe('auto');
  });

  it('the driver probe reports the first driver file that exists', () => {
    expect(nvidiaDriverPresent([noDriver, driver])).toBe(driver);
    expect(nvidiaDriverPresent([noDriver])).toBeNull();
  });
});

describe('variant candidates', () => {
  const cpuPre = `prebuilds/${tuple}/rapid-vlm.napi.node`;
  // The CUDA platform package, installed as a dependency would be (package.json makes it resolvable).
  const cudaPkg = `node_modules/${cudaPackageName()}`;
  const cudaPre = `${cudaPkg}/rapid-vlm.glibc.node`;
  const cudaLocal = 'build/cuda/rapid_native.node';

  it('auto with a CUDA build and a driver: the installed CUDA package, the CUDA local build, then the CPU build', () => {
    const root = fakeRoot([cpuPre, `${cudaPkg}/package.json`, cudaPre, cudaLocal]);
    utimesSync(join(root, cudaLocal), new Date(1000), new Date(1000)); // older: the prebuild stays first
    const plan = planNative({ root, device: 'auto', env: {}, driverPaths: [driver] });
    expect(plan.candidates.map((c) => [c.variant, c.source])).toEqual([
      ['cuda', 'prebuild'],
      ['cuda', 'build'],
      ['cpu', 'prebuild'],
    ]);
    expect(plan.candidates[0].path).toBe(join(root, cudaPre));
    expect(plan.cudaSkipped).toBeUndefined();
    expect(plan.driver).toBe(driver);
    expect(plan.rejected).toEqual([]); // the package's other files are not binaries to reject
  });

  it('finds the CUDA package installed beside rapid, as `npm install -g` lays out both', () => {
    const lib = join(tmp, 'prefix', 'lib', 'node_modules');
    for (const f of [`${cudaPackageName()}/package.json`, `${cudaPackageName()}/rapid-vlm.glibc.node`, 'rapid-vlm/package.json']) {
      mkdirSync(join(lib, f, '..'), { recursive: true });
      writeFileSync(join(lib, f), f.endsWith('.json') ? '{}' : 'not an ELF file');
    }
    const plan = planNative({ root: join(lib, 'rapid-vlm'), device: 'auto', env: {}, driverPaths: [driver] });
    expect(plan.candidates.map((c) => c.path)).toEqual([join(lib, cudaPackageName(), 'rapid-vlm.glibc.node')]);
  });

  it('a CUDA local build newer than the CUDA prebuild wins, and the prebuild is reported as older', () => {
    const root = fakeRoot([`${cudaPkg}/package.json`, cudaPre, cudaLocal]);
    utimesSync(join(root, cudaPre), new Date(1000), new Date(1000));
    const plan = planNative({ root, device: 'auto', env: {}, driverPaths: [driver] });
    expect(plan.candidates.map((c) => c.path)).toEqual([join(root, cudaLocal)]);
    expect(plan.rejected).toEqual([expect.objectContaining({ variant: 'cuda', reason: expect.stringMatching(/older than the local build/) })]);
  });

  it('auto without a driver, or device cpu: the CPU build first, the CUDA build only as a last resort, with the reason', () => {
    const root = fakeRoot([cpuPre, `${cudaPkg}/package.json`, cudaPre]);
    const noGpu = planNative({ root, device: 'auto', env: {}, driverPaths: [noDriver] });
    expect(noGpu.candidates.map((c) => c.variant)).toEqual(['cpu', 'cuda']);
    expect(noGpu.cudaSkipped).toBe(`no NVIDIA driver found (${noDriver} does not exist)`);
    const cpu = planNative({ root, device: 'cpu', env: {}, driverPaths: [driver] });
    expect(cpu.candidates.map((c) => c.variant)).toEqual(['cpu', 'cuda']);
    expect(cpu.cudaSkipped).toBe('device cpu was requested');
    // RAPID_DEVICE decides when no device is passed.
    expect(planNative({ root, env: { RAPID_DEVICE: 'cpu' }, driverPaths: [driver] }).device).toBe('cpu');
  });

  it('no CUDA build: says where it looked', () => {
    const plan = planNative({ root: fakeRoot([cpuPre]), device: 'auto', env: {}, driverPaths: [driver] });
    expect(plan.candidates.map((c) => c.variant)).toEqual(['cpu']);
    expect(plan.cudaSkipped).toBe(`no CUDA build found (looked for RAPID_NATIVE_CUDA_PATH, the ${cudaPackageName()} package, build/cuda/rapid_native.node)`);
  });
});

describe('loading a variant', () => {
  it('auto with a driver loads the CUDA build and records the variant', () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }), RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: cudaInfo }) };
    const n = loadNativeFrom(fakeRoot([]), { device: 'auto', env, driverPaths: [driver] });
    expect(n).toMatchObject({ variant: 'cuda', source: 'env', path: env.RAPID_NATIVE_CUDA_PATH, device: 'auto' });
    expect(n.note).toBeUndefined();
    expect(n.addon.version).toBe('cuda-build');
  });

  it('RAPID_DEVICE=cpu loads the CPU build although CUDA is available', () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }), RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: cudaInfo }), RAPID_DEVICE: 'cpu' };
    const n = loadNativeFrom(fakeRoot([]), { env, driverPaths: [driver] });
    expect(n).toMatchObject({ variant: 'cpu', device: 'cpu', path: env.RAPID_NATIVE_PATH });
    expect(n.note).toBeUndefined();
  });

  it('auto: a CUDA build that fails to load falls back to the CPU build, saying why', () => {
    const root = fakeRoot(['build/cuda/rapid_native.node']);
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }), RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'old-cuda', abi: 3, cuda: cudaInfo }) };
    const n = loadNativeFrom(root, { device: 'auto', env, driverPaths: [driver] });
    expect(n).toMatchObject({ variant: 'cpu', path: env.RAPID_NATIVE_PATH });
    expect(n.rejected.map((r) => [r.variant, r.reason])).toEqual([
      ['cuda', `addon ABI 3 does not match this package's ${NATIVE_ABI}`],
      ['cuda', expect.stringMatching(/^failed to load: .*(invalid ELF header|too short)/)],
    ]);
    expect(n.note).toMatch(/^the CUDA build did not load \(.*old-cuda\.cjs: addon ABI 3 .*; .*rapid_native\.node: failed to load: .*\); using the CPU build$/);
  });

  it('device cuda: a CUDA build that fails to load is an error listing each failure and the build command', () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }) };
    const root = fakeRoot(['build/cuda/rapid_native.node']);
    expect(() => loadNativeFrom(root, { device: 'cuda', env, driverPaths: [driver] })).toThrow(
      /^--device cuda: no CUDA build loaded\.\n {2}- .*build\/cuda\/rapid_native\.node: failed to load: .*\nFix: (install the CUDA build next to rapid .* or )?build the CUDA variant with `npm run build:cuda`.*; or run on the CPU with --device cpu\.$/,
    );
  });

  it('device cuda without a CUDA build or without a driver: names what is missing and how to fix it', () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }) };
    expect(() => loadNativeFrom(fakeRoot([]), { device: 'cuda', env, driverPaths: [driver] })).toThrow(
      /--device cuda: no CUDA build found \(looked for RAPID_NATIVE_CUDA_PATH, .*\)\.\nFix: (install the CUDA build next to rapid .* or )?build the CUDA variant with `npm run build:cuda`/,
    );
    const withBuild = { ...env, RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: cudaInfo }) };
    expect(() => loadNativeFrom(fakeRoot([]), { device: 'cuda', env: withBuild, driverPaths: [noDriver] })).toThrow(
      `--device cuda: no NVIDIA driver found (${noDriver} does not exist).\nFix: install the NVIDIA driver (in containers: --gpus all); or run on the CPU with --device cpu.`,
    );
  });

  it('auto on a machine without a driver and only a CUDA build: the CUDA build runs on the CPU, and says so', () => {
    const env = { RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: { compiled: true, devices: [], error: 'no CUDA-capable device is detected' } }) };
    const n = loadNativeFrom(fakeRoot([]), { device: 'auto', env, driverPaths: [noDriver] });
    expect(n.variant).toBe('cuda');
    expect(n.note).toBe(`no NVIDIA driver found (${noDriver} does not exist); no CPU build loaded, so the CUDA build runs on the CPU`);
  });
});

describe('the process-wide loader and openTextModel', () => {
  const saved = { ...process.env };
  afterEach(() => {
    process.env = { ...saved };
    vi.resetModules();
  });

  it('the first load decides the variant; the device reaches loadModel; RAPID_DEVICE applies without --device', async () => {
    vi.resetModules(); // a fresh binding module: nothing loaded yet in this "process"
    const cpu = writeFakeAddon(tmp, { name: 'cpu-build' });
    process.env.RAPID_NATIVE_PATH = cpu;
    delete process.env.RAPID_NATIVE_CUDA_PATH;
    delete process.env.RAPID_DEVICE;
    const { openTextModel } = await import('../../src/engine/text-model.js');
    const { loadNative } = await import('../../src/native/binding.js');
    const fixture = join(import.meta.dirname, '..', 'fixtures', 'models', 'qwen2-f32');
    const calls = (require(cpu) as { calls: { options: { device?: string; threads?: number } }[] }).calls;

    const m = openTextModel(fixture, { device: 'cpu', threads: 3 });
    expect(m.info.device).toBe('cpu');
    expect(calls.at(-1)?.options).toMatchObject({ device: 'cpu', threads: 3 });
    expect(loadNative()).toMatchObject({ variant: 'cpu', device: 'cpu', path: cpu });

    process.env.RAPID_DEVICE = 'auto';
    openTextModel(fixture, {});
    expect(calls.at(-1)?.options.device).toBe('auto');

    process.env.RAPID_DEVICE = 'gpu';
    expect(() => openTextModel(fixture, {})).toThrow('RAPID_DEVICE must be auto, cpu or cuda, got "gpu"');

    // The CPU build is already in the process: --device cuda cannot switch it any more.
    expect(() => openTextModel(fixture, { device: 'cuda' })).toThrow(/^--device cuda: this process already loaded the CPU build .*cpu-build\.cjs/);
    expect(calls).toHaveLength(2);
  });
});
