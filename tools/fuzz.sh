#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder of outside bytes (fuzz/src/lib.rs lists the targets)
# with AFL++ through cargo-afl, on the stable toolchain.
#
#   tools/fuzz.sh                      every target for 1,000,000 executions (the release bar)
#   tools/fuzz.sh --execs N [TARGET..] N executions each
#   tools/fuzz.sh --seconds S          S seconds each (a short run)
#   tools/fuzz.sh --opt-level N ...    build at optimisation level N instead of 3
#
# Each target starts from the corpus fuzz/src/bin/seeds.rs writes plus every past finding under
# fuzz/regressions/<target>/ (AFL refuses to start when a seed crashes or hangs, so a
# regression that comes back fails the run at once). Inputs run under a 2 GiB address-space
# limit and a 1 s timeout: a crash, a hang or an allocation past the limit is a finding. The
# table at the end gives executions, findings and corpus size per target (memory is bounded
# by the limit: an input that needs more is a crash); the exit status is 1
# when anything was found (the inputs are copied to fuzz/out/findings/<target>/).
set -euo pipefail
cd "$(dirname "$0")/.."

execs=1000000
seconds=""
opt_level=3
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --execs) execs="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --opt-level) opt_level="$2"; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done

command -v cargo-afl >/dev/null 2>&1 || cargo install --locked --quiet cargo-afl@0.18.2
# AFL++ itself, built once per toolchain by cargo-afl.
if ! { cargo afl fuzz -h 2>&1 || true; } | grep -q 'Required parameters'; then
    cargo afl config --build >/dev/null
fi

# cargo-afl builds every crate as one codegen unit (its workaround for old linkers' errors; it
# links with gold); sixteen take a fifth off the build here, and RUSTFLAGS given to it come last,
# so they win (the optimisation level too: a short run's build costs more than its executions).
# With an explicit target the build scripts and proc macros run uninstrumented.
triple=$(rustc -vV | awk '/^host:/ { print $2 }')
(cd fuzz && RUSTFLAGS="-C codegen-units=16 -C opt-level=$opt_level ${RUSTFLAGS:-}" \
    cargo afl build --release --locked --quiet --target "$triple")
# afl-fuzz itself: `cargo afl fuzz` always asks for CmpLog (-c0), which needs the LLVM plugins
# that a stable toolchain cannot build, so the binary cargo-afl built is run directly.
afl_fuzz=$(ls -d "${XDG_DATA_HOME:-$HOME/.local/share}"/afl.rs/rustc-"$(rustc -V | awk '{print $2}')"-*/afl.rs-*/afl/bin/afl-fuzz | head -1)
bin=fuzz/target/$triple/release
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <("$bin/fuzz" 2>&1 | awk 'NR > 1 { print $1 }')
fi

out=fuzz/out
rm -rf "$out"
mkdir -p "$out/seeds" "$out/findings"
"$bin/seeds" "$out/seeds"
for t in "${targets[@]}"; do
    if [ -d "fuzz/regressions/$t" ]; then
        cp fuzz/regressions/"$t"/* "$out/seeds/$t/" 2>/dev/null || true
    fi
done

if [ -n "$seconds" ]; then limit=(-V "$seconds"); else limit=(-E "$execs"); fi
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
run_one() {
    local t="$1"
    "$afl_fuzz" -i "$out/seeds/$t" -o "$out/$t" "${limit[@]}" -m 2048 -t 1000 -- "$bin/fuzz" "$t" \
        > "$out/$t.log" 2>&1 || { echo "afl-fuzz failed on $t (see $out/$t.log):"; tail -20 "$out/$t.log"; return 1; }
}
export -f run_one
export out bin afl_fuzz
export limit_args="${limit[*]}"
# One afl-fuzz per core.
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'limit=($limit_args); run_one {}' || status=1

stat() { awk -F' *: *' -v k="$2" '$1 == k { print $2 }' "$out/$1/default/fuzzer_stats" 2>/dev/null; }
printf '%-22s %12s %9s %8s %6s %8s\n' target executions exec/s crashes hangs corpus
found=0
for t in "${targets[@]}"; do
    crashes=$(stat "$t" saved_crashes)
    hangs=$(stat "$t" saved_hangs)
    printf '%-22s %12s %9s %8s %6s %8s\n' "$t" "$(stat "$t" execs_done)" "$(stat "$t" execs_per_sec)" \
        "${crashes:-?}" "${hangs:-?}" "$(stat "$t" corpus_count)"
    if [ "${crashes:-1}" != 0 ] || [ "${hangs:-1}" != 0 ]; then
        found=1
        mkdir -p "$out/findings/$t"
        cp "$out/$t"/default/crashes/id* "$out/$t"/default/hangs/id* "$out/findings/$t/" 2>/dev/null || true
    fi
done
rm -rf /dev/shm/sp_dust3r_fuzz.* 2>/dev/null || true
if [ "$found" = 1 ] || [ "$status" != 0 ]; then
    echo "findings (or a failed start) under $out/findings; replay one with: $bin/fuzz TARGET < FILE" >&2
    exit 1
fi
