// `rapid doctor`: report structure, exit codes, a broken or crashing RAPID_NATIVE_PATH binary
// probed in a child process (doctor survives and reports it), cache integrity and the smoke test.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { registerDoctor } from '../../src/cli/commands/doctor.js';
import { checkCacheIntegrity } from '../../src/doctor/checks/cache-integrity.js';
import { checkCpuFeatures } from '../../src/doctor/checks/cpu-features.js';
import { checkMemory } from '../../src/doctor/checks/memory.js';
import { checkNodeVersion } from '../../src/doctor/checks/node-version.js';
import { checkPort } from '../../src/doctor/checks/port.js';
import { formatReport } from '../../src/doctor/format-report.js';
import { probeNative } from '../../src/doctor/native-probe.js';
import { runDoctor } from '../../src/doctor/run-doctor.js';
import type { DoctorReport } from '../../src/doctor/types.js';
import { packageRoot } from '../../src/native/binding.js';
import type { NativeCudaInfo } from '../../src/native/types.js';

/** The CPU checks' system info stubs: a CPU-only build. */
const NO_CUDA: NativeCudaInfo = { compiled: false, devices: [] };
const IDS = ['node', 'platform', 'native', 'cpu', 'threads', 'gpu', 'memory', 'disk', 'cache', 'port'];
let tmp: string;
let emptyRoot: string;
let broken: string;
const saved = { ...process.env };

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'rapid-doctor-'));
  emptyRoot = join(tmp, 'pkg'); // a package root with no prebuilds and no local build
  mkdirSync(emptyRoot);
  broken = join(tmp, 'broken.node');
  writeFileSync(broken, Buffer.from('this is not an ELF shared object\n'.repeat(64)));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
beforeEach(() => {
  process.env.HF_HUB_CACHE = join(tmp, 'hub');
  process.env.RAPID_NATIVE_PATH = broken;
});
afterEach(() => {
  process.env = { ...saved };
  process.exitCode = undefined;
});

async function cliDoctor(args: string[], nativeRoot?: string): Promise<{ out: string; code: number | undefined }> {
  const program = new Command('rapid').exitOverride();
  registerDoctor(program, nativeRoot ? { nativeRoot } : {});
  let out = '';
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((out += String(s)), true));
  try {
    await program.parseAsync(['node', 'rapid', 'doctor', ...args]);
  } finally {
    spy.mockRestore();
  }
  const code = process.exitCode as number | undefined;
  process.exitCode = undefined;
  return { out, code };
}

describe('rapid doctor', () => {
  it('--json: every check with status, finding and a fix when not ok; exit 1 when one fails', async () => {
    const { out, code } = await cliDoctor(['--json', '--port', '0'], emptyRoot);
    const report = JSON.parse(out) as DoctorReport;
    expect(report.checks.map((c) => c.id)).toEqual(IDS);
    for (const c of report.checks) {
      expect(['ok', 'warn', 'fail']).toContain(c.status);
      expect(c.finding.length).toBeGreaterThan(0);
      if (c.status !== 'ok') expect(c.fix, c.id).toBeTruthy();
    }
    const native = report.checks.find((c) => c.id === 'native')!;
    expect(native.status).toBe('fail');
    expect(native.finding).toMatch(/broken\.node: failed to load: .*invalid ELF header/);
    expect((native.details as { rejected: { source: string }[] }).rejected.map((r) => r.source)).toContain('env');
    expect(report.ok).toBe(false);
    expect(report.summary.fail).toBeGreaterThanOrEqual(1);
    expect(code).toBe(1);
    // Without the addon, CPU features still come from the OS.
    expect(report.checks.find((c) => c.id === 'cpu')!.finding).toMatch(/from the OS|NEON/);
  });

  it('exit code is 0 exactly when nothing fails (real package root)', async () => {
    const { out, code } = await cliDoctor(['--json', '--port', '0']);
    const report = JSON.parse(out) as DoctorReport;
    expect(code === 1).toBe(!report.ok);
    // The broken env binary is reported either way: a warning when another binary loaded.
    const native = report.checks.find((c) => c.id === 'native')!;
    expect(native.status).not.toBe('ok');
    expect(native.finding).toMatch(/broken\.node/);
  });

  it('prints a readable report with fixes under failures', async () => {
    const { out } = await cliDoctor(['--port', '0'], emptyRoot);
    expect(out).toMatch(/^rapid .* doctor\n/);
    expect(out).toMatch(/FAIL {2}Native binary +no usable native binary/);
    expect(out).toMatch(/\n +fix: build it from source with `npm run build:native`/);
    expect(out).toMatch(/\d+ ok, \d+ warnings?, \d+ failed\n$/);
  });

  it('survives a binary that crashes the process on load', async () => {
    let cc = true;
    try {
      execFileSync('cc', ['--version'], { stdio: 'ignore' });
    } catch {
      cc = false;
    }
    if (!cc) return; // no C compiler: the ELF-header case above covers the child probe
    writeFileSync(join(tmp, 'crash.c'), '#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n');
    execFileSync('cc', ['-shared', '-fPIC', '-o', join(tmp, 'crash.node'), join(tmp, 'crash.c')]);
    process.env.RAPID_NATIVE_PATH = join(tmp, 'crash.node');
    const probe = await probeNative({ root: emptyRoot });
    expect(probe.loaded).toBeUndefined();
    expect(probe.rejected).toEqual([expect.objectContaining({ source: 'env', reason: 'crashed the process while loading (SIGABRT)' })]);
  });

  it('cache integrity reports interrupted downloads and dangling links with a fix', () => {
    const repo = join(tmp, 'hub', 'models--org--m');
    mkdirSync(join(repo, 'blobs'), { recursive: true });
    mkdirSync(join(repo, 'snapshots', 'c'.repeat(40)), { recursive: true });
    mkdirSync(join(repo, 'refs'), { recursive: true });
    writeFileSync(join(repo, 'refs', 'main'), 'c'.repeat(40));
    writeFileSync(join(repo, 'blobs', 'abc.incomplete'), Buffer.alloc(1500));
    symlinkSync(join('..', '..', 'blobs', 'gone'), join(repo, 'snapshots', 'c'.repeat(40), 'config.json'));
    const r = checkCacheIntegrity(join(tmp, 'hub'));
    expect(r.status).toBe('warn');
    expect(r.finding).toBe('1 interrupted download (1.5 kB), 1 snapshot link to missing blobs in org/m');
    expect(r.fix).toMatch(/rapid models pull org\/m/);
    rmSync(repo, { recursive: true });
    expect(checkCacheIntegrity(join(tmp, 'hub')).status).toBe('ok');
  });

  it('port check warns when the port is taken', async () => {
    const srv: Server = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as { port: number }).port;
    const r = await checkPort(port);
    srv.close();
    expect(r).toMatchObject({ status: 'warn', finding: `127.0.0.1:${port} is in use by another program`, fix: `start the server on another port: \`rapid serve --port ${port + 1}\`` });
  });

  it('unit checks: old Node fails, CPU without AVX2 warns, memory names the largest model that fits', () => {
    expect(checkNodeVersion('18.19.0', '9').status).toBe('fail');
    expect(checkCpuFeatures({ simd: ['sse4.2'], kernel: 'generic', threads: 2, cuda: NO_CUDA }, 'x64').status).toBe('warn');
    expect(checkCpuFeatures({ simd: ['avx2', 'fma', 'f16c', 'avx512f'], kernel: 'avx2', threads: 2, cuda: NO_CUDA }, 'x64').finding).toMatch(/AVX-512 without VNNI \(rapid uses its AVX2 kernels\)/);
    const vnni = ['avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512vl', 'avx512_vnni'];
    expect(checkCpuFeatures({ simd: vnni, kernel: 'avx512-vnni', threads: 2, cuda: NO_CUDA }, 'x64')).toMatchObject({ status: 'ok', finding: expect.stringMatching(/kernels: avx512-vnni\).*AVX-512 VNNI kernels$/) });
    expect(checkCpuFeatures({ simd: vnni, kernel: 'avx2', threads: 2, cuda: NO_CUDA }, 'x64').finding).toMatch(/RAPID_CPU_ISA=avx2/);
    expect(checkCpuFeatures({ simd: ['neon', 'asimddp'], kernel: 'neon-dotprod', threads: 2, cuda: NO_CUDA }, 'arm64')).toMatchObject({ status: 'ok', finding: expect.not.stringMatching(/plain NEON/) });
    expect(checkCpuFeatures({ simd: ['neon'], kernel: 'neon', threads: 2, cuda: NO_CUDA }, 'arm64').finding).toMatch(/no dot product instructions .*plain NEON$/);
    expect(checkCpuFeatures({ simd: ['neon'], kernel: 'scalar', threads: 2, cuda: NO_CUDA }, 'arm64')).toMatchObject({ status: 'warn', fix: expect.stringMatching(/RAPID_NO_SIMD/) });
    const m = checkMemory(8e9, 3e9, undefined);
    expect(m.status).toBe('ok');
    expect(m.finding).toMatch(/e\.g\. (qwen3-1\.7b-4bit|qwen2\.5-3b-4bit|llama-3\.2-3b-4bit|qwen2\.5-1\.5b-4bit|qwen2\.5-coder-1\.5b-4bit) /);
    expect(checkMemory(1e9, 2e8, undefined).status).toBe('warn');
  });

  it('--model runs a load-and-generate smoke test when the addon loads', async () => {
    delete process.env.RAPID_NATIVE_PATH;
    const fixture = join(packageRoot(), 'test', 'fixtures', 'models', 'qwen2-q8');
    const report = await runDoctor({ model: fixture, port: 0 });
    const smoke = report.checks.find((c) => c.id === 'model')!;
    if (report.checks.find((c) => c.id === 'native')!.status === 'fail') {
      expect(smoke).toMatchObject({ status: 'fail', finding: 'skipped: no usable native binary (see above)' });
      return;
    }
    expect(smoke.status, smoke.finding).toBe('ok');
    expect(smoke.details).toMatchObject({ family: 'qwen2', completionTokens: 16 });
    const missing = await runDoctor({ model: 'qwen3-0.6b', port: 0 });
    expect(missing.checks.find((c) => c.id === 'model')).toMatchObject({ status: 'fail', fix: expect.stringMatching(/rapid models pull qwen3-0\.6b/) });
    expect(formatReport(missing)).toMatch(/FAIL {2}Model smoke test/);
  });
});
