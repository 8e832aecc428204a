// `rapid doctor`'s GPU check: which variant loaded and why, the GPU it sees (name, memory, compute
// capability, driver) or why models run on the CPU. Probes run on fake addons and fake driver
// files in child processes, as doctor does: no GPU needed.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkGpu, type NvidiaSmiInfo } from '../../src/doctor/checks/gpu.js';
import { checkNativeBinary } from '../../src/doctor/checks/native-binary.js';
import { formatReport } from '../../src/doctor/format-report.js';
import { probeNative } from '../../src/doctor/native-probe.js';
import { H200, writeFakeAddon } from '../helpers/fake-addon.js';

let tmp = '';
let root = '';
let driver = '';
let noDriver = '';
const noSmi = async (): Promise<NvidiaSmiInfo> => ({ devices: [], smi: false });
const smiH200 = async (): Promise<NvidiaSmiInfo> => ({ devices: [{ name: 'NVIDIA H200', memoryMiB: 143771, driver: '570.124.06' }], driver: '570.124.06', smi: true });

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-gpu-check-'));
  root = join(tmp, 'pkg'); // no prebuilds, no local builds: only the env binaries below
  mkdirSync(root);
  driver = join(tmp, 'nvidia-version');
  writeFileSync(driver, 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06\n');
  noDriver = join(tmp, 'no-such-driver');
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

const cudaOk = { compiled: true, devices: [H200], driverVersion: '12.8', runtimeVersion: '13.0' };

describe('doctor GPU check', () => {
  it('no GPU: the CPU build, and why the CUDA one was not used', async () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [noDriver] });
    expect(probe.loaded).toMatchObject({ variant: 'cpu', path: env.RAPID_NATIVE_PATH });
    const r = await checkGpu({ probe, requested: 'auto', platform: 'linux', nvidia: noSmi });
    expect(r.status).toBe('ok');
    expect(r.finding).toBe(
      `no NVIDIA GPU found; the CPU build ${env.RAPID_NATIVE_PATH} loaded (no CUDA build found (looked for RAPID_NATIVE_CUDA_PATH, ` +
        `the rapid-vlm-cuda-${process.platform}-${process.arch} package, build/cuda/rapid_native.node); no NVIDIA driver found (${noDriver} does not exist)); models run on the CPU`,
    );
    expect(r.details).toMatchObject({ variant: 'cpu', path: env.RAPID_NATIVE_PATH, requested: 'auto', driverFile: null });
    // The native check names the variant too.
    expect(checkNativeBinary(probe).finding).toMatch(/^RAPID_NATIVE_PATH .*cpu-build\.cjs \(addon cpu-build\)/);
  });

  it('a GPU: the CUDA build path, device name, memory, compute capability and driver', async () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }), RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: cudaOk }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [driver] });
    expect(probe.loaded).toMatchObject({ variant: 'cuda', path: env.RAPID_NATIVE_CUDA_PATH });
    const r = await checkGpu({ probe, requested: 'auto', platform: 'linux', nvidia: noSmi });
    expect(r.status).toBe('ok');
    expect(r.finding).toBe(
      `CUDA build ${env.RAPID_NATIVE_CUDA_PATH}: cuda:0 NVIDIA H200, 139.8 GiB (138.8 GiB free), compute 9.0; driver 12.8, CUDA runtime 13.0; models run on the GPU, text decoders (Gemma 4, Qwen3-MoE and Qwen3-VL-MoE included) and image towers alike (--device cpu to opt out; a model the GPU cannot run says why)`,
    );
    expect(r.details).toMatchObject({ variant: 'cuda', driverFile: driver, cuda: cudaOk });
    expect(checkNativeBinary(probe).finding).toMatch(/^RAPID_NATIVE_CUDA_PATH .*cuda-build\.cjs \(addon cuda-build\)/);
    const text = formatReport({ rapidVersion: '0.0.0', checks: [r], summary: { ok: 1, warn: 0, fail: 0 }, ok: true });
    expect(text).toContain(`ok    GPU  CUDA build ${env.RAPID_NATIVE_CUDA_PATH}: cuda:0 NVIDIA H200, 139.8 GiB`);
  });

  it('a GPU but only the CPU build: warns and says how to build the CUDA one; RAPID_DEVICE=cpu is fine', async () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [driver] });
    const r = await checkGpu({ probe, requested: 'auto', platform: 'linux', nvidia: smiH200 });
    expect(r.status).toBe('warn');
    expect(r.finding).toMatch(/^NVIDIA H200 \(140 GiB\), driver 570\.124\.06; but the CPU build .*cpu-build\.cjs loaded \(no CUDA build found .*\); models run on the CPU$/);
    expect(r.fix).toMatch(/npm run build:cuda/);
    const cpuProbe = await probeNative({ root, env, device: 'cpu', driverPaths: [driver] });
    const cpu = await checkGpu({ probe: cpuProbe, requested: 'cpu', platform: 'linux', nvidia: smiH200 });
    expect(cpu.status).toBe('ok');
    expect(cpu.finding).toMatch(/the CPU build .* loaded because device cpu was requested/);
  });

  it('a CUDA build that fails to load: the CPU build runs, the reason is shown', async () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }), RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'old-cuda', abi: 3, cuda: cudaOk }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [driver] });
    expect(probe.loaded?.variant).toBe('cpu');
    const r = await checkGpu({ probe, requested: 'auto', platform: 'linux', nvidia: smiH200 });
    expect(r.status).toBe('warn');
    expect(r.finding).toMatch(/\(the CUDA build did not load \(.*old-cuda\.cjs: addon ABI 3 does not match this package's \d+\); using the CPU build\)/);
    expect(r.fix).toMatch(/rebuild the CUDA variant with `npm run build:cuda`/);
  });

  it('the CUDA build with a driver but no usable device: warns with the runtime error', async () => {
    const env = { RAPID_NATIVE_CUDA_PATH: writeFakeAddon(tmp, { name: 'cuda-build', cuda: { compiled: true, devices: [], error: 'CUDA driver version is insufficient for CUDA runtime version' } }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [driver] });
    const r = await checkGpu({ probe, requested: 'auto', platform: 'linux', nvidia: noSmi });
    expect(r.status).toBe('warn');
    expect(r.finding).toMatch(/^CUDA build .*cuda-build\.cjs loaded but sees no usable GPU \(CUDA driver version is insufficient for CUDA runtime version\); models run on the CPU$/);
    expect(r.fix).toMatch(/nvidia-smi/);
  });

  it('RAPID_DEVICE=cuda without a GPU fails; an invalid RAPID_DEVICE fails with the accepted values', async () => {
    const env = { RAPID_NATIVE_PATH: writeFakeAddon(tmp, { name: 'cpu-build' }) };
    const probe = await probeNative({ root, env, device: 'auto', driverPaths: [noDriver] });
    const r = await checkGpu({ probe, requested: 'cuda', platform: 'linux', nvidia: noSmi });
    expect(r.status).toBe('fail');
    expect(r.fix).toMatch(/RAPID_DEVICE=cuda needs an NVIDIA GPU/);
    const bad = await checkGpu({ probe, requested: 'auto', deviceError: 'RAPID_DEVICE must be auto, cpu or cuda, got "gpu"', platform: 'linux', nvidia: noSmi });
    expect(bad).toMatchObject({ status: 'fail', finding: 'RAPID_DEVICE must be auto, cpu or cuda, got "gpu"', fix: 'set RAPID_DEVICE to auto, cpu or cuda, or unset it' });
  });
});
