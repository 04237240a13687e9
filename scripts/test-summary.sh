#!/usr/bin/env bash
# The last line of scripts/test.sh, below the time table, so that a
# failed run cannot be missed: passed or FAILED, how many tests, which
# failed, and how long the run took, from cargo test's output:
#
#   scripts/test-summary.sh LOG STATUS SECONDS
#
# LOG is what cargo test printed on stdout, STATUS its exit status,
# SECONDS the run's wall time.
set -euo pipefail
log=${1:?"usage: scripts/test-summary.sh LOG STATUS SECONDS"}
status=${2:?"usage: scripts/test-summary.sh LOG STATUS SECONDS"}
secs=${3:?"usage: scripts/test-summary.sh LOG STATUS SECONDS"}
took=$(printf '%dm %02ds' $((secs / 60)) $((secs % 60)))
# Every test binary ends with `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
read -r passed failed ignored < <(awk '
/^test result:/ {
    for (i = 2; i <= NF; i++) {
        if ($i ~ /^passed;/) p += $(i - 1)
        if ($i ~ /^failed;/) f += $(i - 1)
        if ($i ~ /^ignored;/) g += $(i - 1)
    }
}
END { printf "%d %d %d\n", p, f, g }' "$log")
names=$(awk '/^test .* \.\.\. FAILED$/ { print $2 }' "$log" | sort -u |
    awk 'NR <= 5 { printf "%s%s", (NR > 1 ? ", " : ""), $0 } END { if (NR > 5) printf ", and %d more", NR - 5 }')
skipped=''
[ "$ignored" = 0 ] || skipped=", $ignored ignored"
if [ "$status" = 0 ]; then
    echo "test.sh: passed: $passed tests$skipped, in $took"
elif [ "$failed" != 0 ]; then
    echo "test.sh: FAILED: $failed of $((passed + failed)) tests ($names), in $took; their output is above the time table"
else
    echo "test.sh: FAILED: cargo test exited $status with no failed test (a build error or a crash: see above), in $took"
fi
