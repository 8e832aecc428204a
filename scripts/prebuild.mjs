#!/usr/bin/env node
// Builds the CPU addons the npm package ships, with prebuildify (Node-API, stripped, libc-tagged):
//   prebuilds/linux-arm64/rapid-vlm.glibc.node  cross-compiled with Debian's aarch64 toolchain
//                                                (g++-aarch64-linux-gnu), when it is installed
//   prebuilds/<this platform>-<this arch>/...   the host build, always, and last: node-gyp builds
//                                                into build/, which then holds the host binary
// node-gyp-build (the package's install script) loads a matching prebuild and compiles nothing.
// macOS binaries need a Mac to build; until one builds them, macOS installs compile from source.
//   node scripts/prebuild.mjs            -> arm64 where the cross toolchain exists, then the host
//   node scripts/prebuild.mjs --all      -> fails when a release target cannot be built (release)
// Env: npm_config_nodedir (Node headers; Debian's /usr serves every arch), JOBS (default 2).
import { spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const all = process.argv.includes('--all');
const CROSS = { arch: 'arm64', prefix: 'aarch64-linux-gnu-' };

const has = (cmd) => spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;

function prebuildify(extraArgs, env) {
  const bin = join(root, 'node_modules', '.bin', 'prebuildify');
  const r = spawnSync(bin, ['--napi', '--strip', '--tag-libc', ...extraArgs], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, JOBS: process.env.JOBS ?? '2', ...env },
  });
  if (r.status !== 0) {
    process.stderr.write(`prebuild: prebuildify ${extraArgs.join(' ')} failed\n`);
    process.exit(r.status ?? 1);
  }
}

const crossCxx = `${CROSS.prefix}g++`;
if (process.platform === 'linux' && process.arch === 'x64') {
  if (has(crossCxx)) {
    process.stdout.write(`prebuild: linux-${CROSS.arch} with ${crossCxx}\n`);
    prebuildify(['--arch', CROSS.arch, '--strip-bin', `${CROSS.prefix}strip`], {
      CC: `${CROSS.prefix}gcc`,
      CXX: crossCxx,
      LINK: crossCxx,
      // Headers are arch-independent; without a nodedir node-gyp would download them.
      npm_config_nodedir: process.env.npm_config_nodedir ?? '/usr',
    });
  } else if (all) {
    process.stderr.write(`prebuild: ${crossCxx} not found (apt-get install g++-aarch64-linux-gnu); --all needs linux-arm64\n`);
    process.exit(1);
  } else {
    process.stdout.write(`prebuild: skipping linux-${CROSS.arch} (${crossCxx} not installed)\n`);
  }
}
process.stdout.write(`prebuild: ${process.platform}-${process.arch}\n`);
prebuildify([]);
