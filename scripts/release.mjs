#!/usr/bin/env node
// Builds what a release publishes, into release/ (git-ignored):
//   1. the CPU prebuilds inside the package: linux-x64 and linux-arm64 (scripts/prebuild.mjs --all;
//      the arm64 one is cross-compiled with g++-aarch64-linux-gnu). macOS prebuilds need a Mac
//      runner, which this script does not have: macOS installs compile from source until then.
//   2. the optional CUDA package packages/rapid-vlm-cuda-linux-x64 (scripts/build-cuda.mjs --prebuild),
//      its version set to rapid-vlm's; skipped without nvcc, unless --cuda makes it required.
//   3. npm pack of rapid-vlm (and of the CUDA package) into release/.
//   4. Formula/rapid.rb for the packed tarball (scripts/formula.mjs): url and sha256.
// Publishing (npm publish release/*.tgz, then committing the formula) stays a person's step.
//   node scripts/release.mjs [--cuda] [--no-build]   (--no-build packs the prebuilds already there)
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));
const out = join(root, 'release');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const cudaDir = join(root, 'packages', 'rapid-vlm-cuda-linux-x64');
const nvcc = join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'bin', 'nvcc');

function step(cmd, argv, cwd = root) {
  process.stdout.write(`release: ${cmd} ${argv.join(' ')}\n`);
  const r = spawnSync(cmd, argv, { cwd, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, npm_config_nodedir: process.env.npm_config_nodedir ?? '/usr' } });
  if (r.status !== 0) {
    process.stderr.write(`release: ${cmd} ${argv.join(' ')} failed\n`);
    process.exit(r.status ?? 1);
  }
}

/** npm pack `dir` into release/; returns the tarball's path. */
function pack(dir) {
  const r = spawnSync('npm', ['pack', '--json', '--pack-destination', out], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) process.exit(r.status ?? 1);
  const file = join(out, JSON.parse(r.stdout)[0].filename);
  process.stdout.write(`release: ${file}\n`);
  return file;
}

mkdirSync(out, { recursive: true });
const cudaBinary = join(cudaDir, 'rapid-vlm.glibc.node');
if (!args.has('--no-build')) {
  step(process.execPath, ['scripts/prebuild.mjs', '--all']);
  if (args.has('--cuda') || existsSync(nvcc)) step(process.execPath, ['scripts/build-cuda.mjs', '--prebuild']);
  else process.stdout.write(`release: no ${nvcc}; the CUDA package is not built (--cuda requires it)\n`);
}
const tarball = pack(root);
if (existsSync(cudaBinary)) {
  // Published in step with rapid-vlm: the loader checks the addon ABI, users match the version.
  const cudaPkgPath = join(cudaDir, 'package.json');
  const cudaPkg = JSON.parse(readFileSync(cudaPkgPath, 'utf8'));
  if (cudaPkg.version !== pkg.version) writeFileSync(cudaPkgPath, JSON.stringify({ ...cudaPkg, version: pkg.version }, null, 2) + '\n');
  pack(cudaDir);
} else if (args.has('--cuda')) {
  process.stderr.write(`release: ${cudaBinary} missing (node scripts/build-cuda.mjs --prebuild)\n`);
  process.exit(1);
}
step(process.execPath, ['scripts/formula.mjs', tarball]);
