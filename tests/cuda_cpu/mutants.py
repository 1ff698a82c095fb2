#!/usr/bin/env python3
"""Shows that the CUDA CPU tier can fail: each bug below, applied to a copy of
the kernels, must fail test_cuda_cpu in at least one thread order, and the
unchanged copy must pass in all three. Prints one row per case.

Usage: mutants.py SOURCE_DIR BUILD_DIR
It writes the (mutated) host copies into BUILD_DIR/tests/cuda_cpu/mutant/,
builds the target test_cuda_cpu_mutant and runs it; the sources are never
touched. Exit 0: every mutant caught and the control passed.
"""
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewrite_cuda  # noqa: E402

KERNELS = ['elementwise', 'reduce', 'embedding', 'attention', 'ring_attention']
ORDERS = ['forward', 'reverse', 'random:20261203']

# (name, file, the text, its replacement, the tests that must catch it)
MUTANTS = [
    ('removed __syncthreads in a block reduction', 'device_math.cuh',
     '  if (lane == 0) shared[warp] = m, shared[32 + warp] = s;\n  __syncthreads();\n',
     '  if (lane == 0) shared[warp] = m, shared[32 + warp] = s;\n', '*CrossEntropy*'),
    ('grid-stride loop one past the end', 'device_math.cuh',
     'threadIdx.x; i < (n);', 'threadIdx.x; i <= (n);', '*Elementwise*'),
    ('warp reduction stopping one step early', 'device_math.cuh',
     '__device__ __forceinline__ float warp_sum(float v) {\n  for (int o = 16; o > 0; o >>= 1)',
     '__device__ __forceinline__ float warp_sum(float v) {\n  for (int o = 16; o > 1; o >>= 1)', '*Norms*'),
    ('vector packs rounded up past the end', 'kernels_elementwise.cu',
     'packed ? n / kPack * kPack : 0;', 'packed ? (n + kPack - 1) / kPack * kPack : 0;', '*Elementwise*'),
    ('dropped term in AdamW (weight decay)', 'kernels_elementwise.cu',
     'const float pi = p[i] * decay - ', 'const float pi = p[i] - ', '*Adamw*'),
    ('double bf16 rounding (LayerNorm output rounded before its bias)', 'kernels_reduce.cu',
     '    const float n = (ld(x, o + c) - m) * s * ld(w, c);\n',
     '    const float n0 = (ld(x, o + c) - m) * s * ld(w, c);\n'
     '    const float n = sizeof(T) == 2 ? __bfloat162float(__float2bfloat16_rn(n0)) : n0;\n', '*Norms*'),
    ('ring pair merge not rescaling the running output', 'kernels_ring_attention.cu',
     'a[k] = a[k] * corr + e_s', 'a[k] = a[k] + e_s', '*RingPairs*'),
    ('merge of a cuDNN block not rescaling the running output', 'kernels_ring_attention.cu',
     'out[e] = out[e] * corr + w * ld(o_blk, o + e)', 'out[e] = out[e] + w * ld(o_blk, o + e)', '*RingPairs*'),
    ('the log-sum-exp handed to cuDNN without the sum', 'kernels_ring_attention.cu',
     'lse[r] = st_row[0] + logf(st_row[1]);', 'lse[r] = st_row[0];', '*RingPairs*'),
]


def write_copies(src, out, mutant):
    """The four host copies and device_math.cuh, with `mutant` applied."""
    (out / 'runtime' / 'cuda').mkdir(parents=True, exist_ok=True)

    def text(name):
        t = (src / 'runtime' / 'cuda' / name).read_text()
        if mutant and mutant[1] == name:
            if mutant[2] not in t:
                raise SystemExit(f"mutant '{mutant[0]}': its text is no longer in {name}")
            t = t.replace(mutant[2], mutant[3], 1)
        return t

    # Written only when changed, so the build recompiles just what differs.
    def put(path, t):
        if not path.exists() or path.read_text() != t:
            path.write_text(t)

    put(out / 'runtime' / 'cuda' / 'device_math.cuh', text('device_math.cuh'))
    for k in KERNELS:
        name = f'kernels_{k}.cu'
        rewritten, _ = rewrite_cuda.rewrite_launches(text(name))
        rewritten, _ = rewrite_cuda.rewrite_shared(rewritten)
        put(out / f'kernels_{k}.emu.cpp', f'#line 1 "mutant/{name}"\n{rewritten}')


def run(binary, order, gtest_filter):
    env = dict(os.environ, TRAINER_EMU_ORDER=order)
    r = subprocess.run([binary, f'--gtest_filter={gtest_filter}'], env=env, capture_output=True, text=True,
                       timeout=600)
    return r.returncode == 0


def main():
    src, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out = build / 'tests' / 'cuda_cpu' / 'mutant'
    binary = build / 'tests' / 'cuda_cpu' / 'test_cuda_cpu_mutant'
    ok = True
    print(f"{'case':<66} " + ' '.join(f'{o.split(":")[0]:>8}' for o in ORDERS) + '  verdict')
    for mutant in [None] + MUTANTS:
        t0 = time.time()
        write_copies(src, out, mutant)
        b = subprocess.run(['cmake', '--build', str(build), '--target', 'test_cuda_cpu_mutant'], capture_output=True,
                           text=True)
        if b.returncode:
            print(b.stdout[-3000:], b.stderr[-3000:])
            raise SystemExit('the mutant copy did not build')
        gtest_filter = mutant[4] if mutant else 'CudaCpu/*:-*Attention*'
        passed = [run(str(binary), o, gtest_filter) for o in ORDERS]
        name = mutant[0] if mutant else 'control: the kernels unchanged'
        good = all(passed) if mutant is None else not all(passed)
        ok &= good
        cells = ' '.join(f'{"pass" if p else "FAIL":>8}' for p in passed)
        verdict = ('passes' if mutant is None else 'caught') if good else 'NOT AS EXPECTED'
        print(f'{name:<66} {cells}  {verdict} ({time.time() - t0:.0f} s)', flush=True)
    write_copies(src, out, None)
    print('every mutant caught' if ok else 'FAILED: a mutant went unnoticed or the control failed')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
