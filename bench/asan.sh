#!/usr/bin/env bash
# `make asan`: the C core built with AddressSanitizer and UBSan, and the tests that drive it.
#
# The sanitized build goes into build/asan/, a copy of the package with its own extension
# module, so the normal build that `make test` imports is left alone. The tests run from
# build/asan/ (the current directory comes first on sys.path, ahead of the editable
# install), with libasan preloaded because the Python interpreter itself is not
# instrumented. Leak detection is off: CPython keeps allocations until exit by design.
#
# Usage: bench/asan.sh [PYTHON] [PYTEST ARGS...]   (PYTHON defaults to .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${1:-$ROOT/.venv/bin/python}
shift || true
case $PY in  # absolute, without resolving the venv's symlink: the tests run elsewhere
    */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;;
esac
OUT=$ROOT/build/asan
SANITIZE="-fsanitize=address,undefined"

# the tests that exercise the C core: the C/Python parity of each structure, the end-to-end
# parity with the reference's recorded reports (C backend forced below), and the property
# tests, which drive the pools and hashing with generated shapes
TESTS=(test_native_parity.py test_block_pool.py test_rng.py test_radix_cache.py
       test_determinism.py test_reference_parity.py test_trace_reference.py
       test_semantics_cases.py test_disaggregated.py test_sglang.py test_trtllm.py
       test_properties.py test_eviction_log.py test_decode_run.py test_hash_counts.py
       test_token_stats.py test_sglang_extension.py test_vllm_native.py test_id_ranges.py
       test_vllm_native_roles.py test_arrivals.py test_radix_native.py test_sglang_native.py
       test_plain_loop.py test_one_turn_driver.py test_offload_tier.py test_plain_native.py
       test_vllm_native_mtp.py test_plain_disagg_native.py test_vllm_native_state.py)

TESTS+=(test_kv_router_native.py test_plain_native_cluster.py test_plain_disagg_native_cluster.py
        test_ref_hashes.py test_cluster_cases.py test_sglang_native_roles.py
        test_features_sglang.py test_pass_time.py)

started=$(date +%s)
rm -rf "$OUT"
mkdir -p "$OUT"
cp -r aisimulate_core csrc "$OUT"/
rm -f "$OUT"/aisimulate_core/_native*.so "$OUT"/aisimulate_core/_native.c
find "$OUT" -name __pycache__ -prune -exec rm -rf {} +

# ffi_build.py names its sources relative to the current directory, and cffi compiles in
# tmpdir: building from inside the copy keeps both the same. distutils adds CFLAGS and
# LDFLAGS to the extension's own flags.
(cd "$OUT" && CFLAGS="$SANITIZE -fno-omit-frame-pointer -g" LDFLAGS="$SANITIZE" "$PY" -c '
import runpy
runpy.run_path("csrc/ffi_build.py")["ffibuilder"].compile(tmpdir=".")
')
SO=$(ls "$OUT"/aisimulate_core/_native*.so)
LIBASAN=$(ldd "$SO" | awk '/libasan/ {print $3}')
if [ -z "$LIBASAN" ] || ! ldd "$SO" | grep libubsan > /dev/null; then  # not -q: an early exit would SIGPIPE ldd under pipefail
    echo "asan: $SO is not linked against libasan and libubsan" >&2
    exit 1
fi

export LD_PRELOAD=$LIBASAN
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export AISIMULATE_BACKEND=c
cd "$OUT"

# the sanitized module is the one the tests import, and the sanitizer is live: hashing 64
# tokens out of a 4-token buffer must be stopped
"$PY" -c '
import sys, aisimulate_core.native as native
if not native.__file__.startswith(sys.argv[1]) or native.BACKEND != "c":
    sys.exit(f"asan: imported {native.__file__} with backend {native.BACKEND}")
' "$OUT/"
if "$PY" -c '
from aisimulate_core.native import ffi, lib
tokens, out = ffi.new("uint32_t[4]"), ffi.new("uint64_t[64]")
lib.aisim_hash_blocks(tokens, 64, 4, 0, 0, out, 64)
' 2>/dev/null; then
    echo "asan: an out-of-bounds read in the C core went unnoticed" >&2
    exit 1
fi
built=$(date +%s)

"$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]/#/$ROOT/tests/}" "$@"
echo "asan: build and self-check $((built - started)) s, tests $(($(date +%s) - built)) s"
