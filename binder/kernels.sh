# Sourced by binder/postBuild and binder/start: numba compiles the engine's kernels for a named
# CPU level, x86-64-v3 (AVX2, FMA, BMI2: every x86 server CPU since about 2015), instead of the
# exact CPU it runs on. numba keys its cache by the CPU it compiled for, so kernels postBuild
# compiled for the host that built the image were useless on the host the pod lands on (a
# compile before the first view, on the pod's one CPU); compiled for x86-64-v3 they are found
# on any of them. The price: no AVX-512 in numba's kernels, measured in BENCHMARKS.md
# ("Binder as it really runs"). On a CPU without the x86-64-v3 features nothing is set (numba compiles for
# the CPU it finds, at the first Engine(), with a note). INFERLAB_NATIVE_KERNELS=1: the exact
# CPU, as everywhere else. (INFERLAB_CPUINFO: another /proc/cpuinfo to read, for the tests.)
X86_64_V3_FLAGS="avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
X86_64_V3_FEATURES="+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+popcnt,+sse4.2,+xsave"
if [ "${INFERLAB_NATIVE_KERNELS-0}" != "1" ] && [ -z "${NUMBA_CPU_NAME-}" ]; then
    _cpu_flags=" $(grep -m1 "^flags" "${INFERLAB_CPUINFO:-/proc/cpuinfo}" 2>/dev/null | cut -d: -f2) "
    _has_all=1
    for _f in $X86_64_V3_FLAGS; do
        case "$_cpu_flags" in *" $_f "*) ;; *) _has_all=0 ;; esac
    done
    if [ "$_has_all" = "1" ]; then
        export NUMBA_CPU_NAME=x86-64-v3
        export NUMBA_CPU_FEATURES="$X86_64_V3_FEATURES"
    fi
    unset _cpu_flags _has_all _f
fi
