#!/usr/bin/env python3
"""Phase profile of the CUDA sampler's cluster path (native/src/cuda/sample.cu), for docs/cuda.md's cycle tables.

  here:    python3 scripts/sample-profile.py build      # after build-cuda.mjs --sass-only (its objects are linked)
           -> build/cuda/tests/cuda_sample_prof: cuda_sample_test's timing part over a copy of sample.cu with
              clock64 stamps (rank 0, thread 0 of the launch's first row), one PROF line per launch
  device:  build/cuda/tests/cuda_sample_prof > prof.txt; python3 scripts/sample-profile.py summarize prof.txt
           -> per timed setting: the launch's time and the mean cycles of each phase

Nothing here is built by CI: the stamps and printf change the kernel's registers, so only the phases' shares (and
old-against-new in one call) mean anything, not the absolute time of a profile build.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ['max', 'histogram', 'bin sums', 'prefix', 'plan', 'compact', 'cut', 'nucleus', 'draw sum', 'draw', 'finish']

# (anchor in sample.cu, the phase a stamp placed right after it closes); each anchor must occur exactly once.
STAMPS = [
    ("  if (tid == 0) me.best_v = bv, me.best_i = bi, me.n_valid = n_valid;\n  csync(C);\n", 'max'),
    ("    }, g_begin, g_end);\n  csync(C);\n  const int share", 'histogram'),
    ("    cnt[b] = c, mass[b] = m, massd[b] = mp ? md : m;\n  }\n  csync(C);\n", 'bin sums'),
    ("    massd[b0] = da + d0, massd[b0 + 1] = da + d0 + d1;\n    __syncthreads();\n  }\n", 'prefix'),
    ("    csync(C);  // fill is set\n    compact();\n    csync(C);\n", 'compact'),
    ("      z = cum(mass, bk - 1) + seg_sum(s, m, k_entry, entry_wt);\n    }\n", 'cut'),
    ("      if (end_entry == 0) break;\n      has_end = true;\n    }\n", 'nucleus'),
    ("      total = cum(massd, be - 1) + seg_sum(s, seg_end(be) - s, end_entry, draw_wt);\n    }\n", 'draw sum'),
    ("  } while (false);\n", 'draw'),
    ("  if (tid == 0) tokens[row] = int32_t(token);\n", 'finish'),
]


def stamp(phase):
    return f'  STAMP({PHASES.index(phase)});\n'


def patch_kernel(src):
    def once(text, anchor):
        if text.count(anchor) != 1:
            sys.exit(f'sample-profile: anchor found {text.count(anchor)} times, not once: {anchor!r}')
        return text.index(anchor) + len(anchor)

    for anchor, phase in STAMPS:
        if anchor.endswith('const int share'):
            at = once(src, anchor) - len('  const int share')
        else:
            at = once(src, anchor)
        src = src[:at] + stamp(phase) + src[at:]
    # 'plan' closes where a compaction round starts (before its barrier).
    start = "    csync(C);  // fill is set\n"
    at = once(src, start) - len(start)
    src = src[:at] + stamp('plan') + src[at:]
    head = "  pdl_wait();\n  pdl_trigger();\n  extern __shared__ __align__(16) uint64_t dyn[];\n"
    at = once(src, head)
    src = src[:at] + (
        "  long long st_t[32]; int st_p[32]; int st_n = 0;  // profile: stamps (rank 0, thread 0 of the first row)\n"
        "  const long long st_0 = clock64();\n"
        "#define STAMP(p) do { if (blockIdx.x == 0 && threadIdx.x == 0 && st_n < 32) st_t[st_n] = clock64(), "
        "st_p[st_n++] = (p); } while (0)\n") + src[at:]
    tail = "  if (tid == 0) tokens[row] = int32_t(token);\n" + stamp('finish')
    at = once(src, tail)
    src = src[:at] + (
        '  if (blockIdx.x == 0 && tid == 0) {\n'
        '    printf("PROF C=%d", C);\n'
        '    long long prev = st_0;\n'
        '    for (int i = 0; i < st_n; ++i) printf(" %d:%lld", st_p[i], st_t[i] - prev), prev = st_t[i];\n'
        '    printf("\\n");\n'
        '  }\n') + src[at:]
    return '#include <cstdio>\n' + src


def patch_test(src):
    anchor = "    for (int64_t vocab : {int64_t(1000), int64_t(32003), int64_t(151936)}) test_vocab(vocab);\n"
    if src.count(anchor) != 1:
        sys.exit('sample-profile: cuda_sample_test.cu main() changed; update scripts/sample-profile.py')
    return src.replace(anchor, '')


def build():
    obj = os.path.join(ROOT, 'build/cuda/obj-sm90-sass')
    tmp = os.path.join(ROOT, 'build/cuda/profile')
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(ROOT, 'native/src/cuda/sample.cu')) as f:
        kernel = patch_kernel(f.read())
    with open(os.path.join(tmp, 'sample_prof.cu'), 'w') as f:
        f.write(kernel)
    with open(os.path.join(ROOT, 'native/test/cuda_sample_test.cu')) as f:
        test = patch_test(f.read())
    with open(os.path.join(tmp, 'cuda_sample_prof.cu'), 'w') as f:
        f.write(test)
    objs = sorted(os.path.join(obj, o) for o in os.listdir(obj)
                  if o.endswith('.o') and not o.startswith('addon_') and o != 'cuda_sample.cu.o')
    flags = ['-std=c++20', '-O3', '-gencode', 'arch=compute_90a,code=sm_90a', '-Xcompiler', '-fPIC', '-DRAPID_CUDA=1',
             '-DRAPID_CUDA_SM90A=1', '-I' + os.path.join(ROOT, 'native/src'), '-I' + os.path.join(ROOT, 'native/test')]
    kobj = os.path.join(tmp, 'sample_prof.o')
    subprocess.run(['nvcc', *flags, '-c', '-o', kobj, os.path.join(tmp, 'sample_prof.cu')], check=True)
    out = os.path.join(ROOT, 'build/cuda/tests/cuda_sample_prof')
    subprocess.run(['nvcc', *flags, '-o', out, os.path.join(tmp, 'cuda_sample_prof.cu'), *objs, kobj, '-lpthread'],
                   check=True)
    print(f'sample-profile: {os.path.relpath(out, ROOT)}')


def summarize(path):
    sums, n = {}, 0
    with open(path) as f:
        for line in f:
            if line.startswith('PROF'):
                n += 1
                for item in line.split()[2:]:
                    p, cycles = item.split(':')
                    sums[int(p)] = sums.get(int(p), 0) + int(cycles)
            elif line.startswith('TIME sample_rows') and n:
                total = sum(sums.values()) / n
                parts = ', '.join(f'{PHASES[p]} {sums[p] / n / 1e3:.1f}k' for p in sorted(sums))
                print(f"{' '.join(line[17:].split())} | {total / 1e3:.0f}k cycles: {parts}")
                sums, n = {}, 0
            elif line.startswith('TIME'):
                sums, n = {}, 0


if __name__ == '__main__':
    if len(sys.argv) == 2 and sys.argv[1] == 'build':
        build()
    elif len(sys.argv) == 3 and sys.argv[1] == 'summarize':
        summarize(sys.argv[2])
    else:
        sys.exit('usage: sample-profile.py build | summarize PROF_LOG')
