#!/usr/bin/env node
// Builds the CUDA variant of the native addon: nvcc compiles native/src/cuda/*.cu (sm_80 and sm_90a
// machine code plus PTX for newer GPUs), g++ compiles every other native source with RAPID_CUDA=1, and
// the CUDA runtime is linked statically, so the binary loads on machines without a GPU or driver.
//   node scripts/build-cuda.mjs            -> build/cuda/rapid_native.node
//   node scripts/build-cuda.mjs --prebuild -> also packages/rapid-vlm-cuda-<platform>-<arch>/rapid-vlm.glibc.node
//     (stripped): the optional CUDA package, published beside rapid-vlm by scripts/release.mjs
//   node scripts/build-cuda.mjs --tests    -> also build/cuda/tests/<name> for native/test/cuda_*_test.cu
//   --sass-only: machine code for RAPID_CUDA_ARCHS alone, no PTX (for binaries carried to a known GPU by
//     scripts/device/*: the PTX is most of an xz tarball's size); objects in their own folder
//   node scripts/build-cuda.mjs --timeline -> build/cuda-timeline/rapid_native.node, a profiling build whose kernels
//     record when each one's wait on the previous kernel released (native/src/cuda/timeline.cuh; never shipped)
// Env: CUDA_HOME (default /usr/local/cuda), RAPID_CUDA_ARCHS (default "80,90"), RAPID_WERROR=1.
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { cpus } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));
const cuda = process.env.CUDA_HOME ?? '/usr/local/cuda';
const nvcc = join(cuda, 'bin', 'nvcc');
const werror = process.env.RAPID_WERROR === '1';
const archs = (process.env.RAPID_CUDA_ARCHS ?? '80,90').split(',').map((a) => a.trim()).filter(Boolean);
const timeline = args.has('--timeline');
const sassOnly = args.has('--sass-only');
if (timeline && (args.has('--prebuild') || args.has('--tests'))) {
  process.stderr.write('build-cuda: --timeline is a profiling build; it takes neither --prebuild nor --tests\n');
  process.exit(1);
}
const out = join(root, 'build', timeline ? 'cuda-timeline' : 'cuda');
// Objects depend on the target GPUs: one folder per arch list, so changing RAPID_CUDA_ARCHS rebuilds.
const objDir = join(out, `obj-sm${archs.join('-')}${sassOnly ? '-sass' : ''}`);

if (!existsSync(nvcc)) {
  process.stderr.write(`build-cuda: ${nvcc} not found; install the CUDA toolkit or set CUDA_HOME\n`);
  process.exit(1);
}
const nodeInclude = process.env.npm_config_nodedir
  ? join(process.env.npm_config_nodedir, 'include', 'node')
  : join(dirname(process.execPath), '..', 'include', 'node');
const addonApi = createRequire(import.meta.url)('node-addon-api').include_dir.replace(/^"|"$/g, '');

// sm_90 machine code is built as sm_90a (the H100/H200's arch-specific set: warpgroup MMA), which loads on compute
// capability 9.0 alone; the PTX stays generic compute_90 for newer GPUs. RAPID_CUDA_SM90A tells the host code.
const sass = (a) => (a === '90' ? '90a' : a);
const sm90a = archs.some((a) => sass(a) === '90a');
const defines = ['-DRAPID_CUDA=1', '-DNAPI_VERSION=8', '-DNAPI_CPP_EXCEPTIONS', '-DNODE_ADDON_API_DISABLE_DEPRECATED',
  ...(timeline ? ['-DRAPID_CUDA_TIMELINE=1'] : []), ...(sm90a ? ['-DRAPID_CUDA_SM90A=1'] : [])];
const warn = ['-Wall', '-Wextra', '-Wno-unused-parameter'];
const cxxFlags = ['-std=c++20', '-O3', '-fPIC', '-fexceptions', '-pthread', ...warn, ...(werror ? ['-Werror'] : []),
  ...defines, `-I${join(cuda, 'include')}`, `-I${addonApi}`, `-I${nodeInclude}`, `-I${join(root, 'native', 'src')}`];
const gencode = archs.flatMap((a) => ['-gencode', `arch=compute_${sass(a)},code=sm_${sass(a)}`]);
const top = archs[archs.length - 1];
const ptx = sassOnly ? [] : ['-gencode', `arch=compute_${top},code=compute_${top}`];
const nvccFlags = ['-std=c++20', '-O3', ...gencode, ...ptx,
  '-Xcompiler', ['-fPIC', ...warn].join(','), ...(werror ? ['-Werror', 'all-warnings'] : []), ...defines,
  `-I${join(root, 'native', 'src')}`];

function walk(dir, ext) {
  const found = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) found.push(...walk(p, ext));
    else if (e.name.endsWith(ext)) found.push(p);
  }
  return found.sort();
}

const src = join(root, 'native', 'src');
const headersMtime = Math.max(...[...walk(src, '.h'), ...walk(src, '.cuh')].map((f) => statSync(f).mtimeMs));
const objectOf = (file) => join(objDir, relative(src, file).replace(/[\\/]/g, '_') + '.o');
// Rebuild an object when its source or any header is newer (headers are few; precision is not worth more).
const stale = (file, obj) => !existsSync(obj) || statSync(obj).mtimeMs < Math.max(statSync(file).mtimeMs, headersMtime);

function run(cmd, argv) {
  return new Promise((ok, fail) => {
    const p = spawn(cmd, argv, { stdio: ['ignore', 'inherit', 'inherit'] });
    p.on('error', fail);
    p.on('close', (code) => (code === 0 ? ok() : fail(new Error(`${basename(cmd)} exited ${code}: ${argv.at(-1)}`))));
  });
}

async function pool(jobs, width) {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await jobs[next++]();
  };
  await Promise.all(Array.from({ length: Math.min(width, jobs.length) }, worker));
}

async function main() {
  mkdirSync(objDir, { recursive: true });
  const cuFiles = walk(src, '.cu');
  const cppFiles = walk(src, '.cpp');
  const jobs = [];
  for (const f of cuFiles) {
    const o = objectOf(f);
    if (stale(f, o)) jobs.push(() => (process.stdout.write(`  NVCC ${relative(root, f)}\n`), run(nvcc, [...nvccFlags, '-c', '-o', o, f])));
  }
  for (const f of cppFiles) {
    const o = objectOf(f);
    if (stale(f, o)) jobs.push(() => (process.stdout.write(`  CXX  ${relative(root, f)}\n`), run('g++', [...cxxFlags, '-c', '-o', o, f])));
  }
  await pool(jobs, Math.max(1, cpus().length));

  const objects = [...cuFiles, ...cppFiles].map(objectOf);
  const cudart = [join(cuda, 'lib64', 'libcudart_static.a'), '-ldl', '-lrt'];
  const addon = join(out, 'rapid_native.node');
  await run('g++', ['-shared', '-pthread', '-Wl,-z,now', '-o', addon, ...objects, ...cudart]);
  process.stdout.write(`build-cuda: ${relative(root, addon)} (archs ${archs.join(', ')}${sassOnly ? ', no PTX' : ` + PTX ${top}`})\n`);

  if (args.has('--prebuild')) {
    const dir = join(root, 'packages', `rapid-vlm-cuda-${process.platform}-${process.arch}`);
    if (!existsSync(join(dir, 'package.json'))) throw new Error(`no CUDA package for ${process.platform}-${process.arch} (${relative(root, dir)}/package.json)`);
    const target = join(dir, 'rapid-vlm.glibc.node');
    copyFileSync(addon, target);
    await run('strip', ['--strip-unneeded', target]);
    process.stdout.write(`build-cuda: ${relative(root, target)}\n`);
  }

  if (args.has('--tests')) {
    const testDir = join(out, 'tests');
    mkdirSync(testDir, { recursive: true });
    // The op tests link every runtime object except the Node-API glue.
    const runtime = objects.filter((o) => !basename(o).startsWith('addon_'));
    const tests = walk(join(root, 'native', 'test'), '.cu').filter((f) => basename(f).startsWith('cuda_'));
    await pool(tests.map((t) => () => {
      const exe = join(testDir, basename(t, '.cu'));
      process.stdout.write(`  TEST ${relative(root, t)}\n`);
      return run(nvcc, [...nvccFlags, '-o', exe, t, ...runtime, '-lpthread']);
    }), Math.max(1, cpus().length));
  }
}

main().catch((e) => {
  process.stderr.write(`build-cuda: ${e.message}\n`);
  process.exit(1);
});
