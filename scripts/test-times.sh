#!/usr/bin/env bash
# The cost of each test module, costliest first, from the lines
# `MODULE::TEST<TAB>MILLISECONDS` that the integration harness writes to
# the file named by $REDLOCK_TEST_TIMES (see scripts/test.sh):
#
#   scripts/test-times.sh FILE
#
# A module's time is the sum of its tests' times (tests run in parallel,
# so the sum exceeds the wall time of the run); its slowest test is named.
# A test that calls no harness helper (a pure text check) is not timed.
set -euo pipefail
file=${1:?"usage: scripts/test-times.sh FILE"}
[ -s "$file" ] || { echo "test times: none recorded"; exit 0; }
awk -F'\t' '
{
    split($1, part, "::")
    module = part[1]
    ms = $2 + 0
    sum[module] += ms; count[module]++; total += ms; tests++
    if (ms >= worst[module]) { worst[module] = ms; name[module] = substr($1, length(module) + 3) }
}
END {
    printf "test times (%d tests, %.1f s of test time in all), costliest module first:\n", tests, total / 1000
    printf "%-20s %6s %9s  %s\n", "module", "tests", "seconds", "slowest test (seconds)"
    for (m in sum) printf "%s\t%d\t%.1f\t%s (%.1f)\n", m, count[m], sum[m] / 1000, name[m], worst[m] / 1000
}' "$file" | {
    IFS= read -r title && echo "$title"
    IFS= read -r header && echo "$header"
    sort -t$'\t' -k3,3 -rn | awk -F'\t' '{ printf "%-20s %6d %9.1f  %s\n", $1, $2, $3, $4 }'
}
