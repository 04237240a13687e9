
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'redlock-run' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'redlock-run'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'redlock-run' {
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock name: any non-empty UTF-8 string without control characters; repeat it to hold several keys, all or nothing')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock name: any non-empty UTF-8 string without control characters; repeat it to hold several keys, all or nothing')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'Lifetime of the lock in Redis; refreshed while COMMAND runs')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lifetime of the lock in Redis; refreshed while COMMAND runs')
            [CompletionResult]::new('--refresh', '--refresh', [CompletionResultType]::ParameterName, 'Refresh period; must be shorter than the TTL')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: seconds (10, 0.5), a duration (30s, 5m) or `forever`; `0` tries once')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: seconds (10, 0.5), a duration (30s, 5m) or `forever`; `0` tries once')
            [CompletionResult]::new('--period', '--period', [CompletionResultType]::ParameterName, 'Cron: the schedule''s period (5m for */5); run once per period on however many hosts; implies -n')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock could not be had in time')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock could not be had in time')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run LINE with `sh -c` instead of a trailing COMMAND')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run LINE with `sh -c` instead of a trailing COMMAND')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when COMMAND must be stopped; shorter than the TTL')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least this long after acquiring it, even if COMMAND ends sooner (absorbs clock skew between cron hosts)')
            [CompletionResult]::new('--max-hold', '--max-hold', [CompletionResultType]::ParameterName, 'Stop COMMAND if it still runs after this long; exit 124')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'How waiters stand in line: `oldest-first`, `newest-first` (a new waiter goes to the front) or `newest-wins` (a new waiter replaces the older ones, which exit 79)')
            [CompletionResult]::new('--queue-max', '--queue-max', [CompletionResultType]::ParameterName, 'At most N runs wait in line for KEY (1-10000): one more exits at once with the busy code; under `--queue newest-wins` a newcomer replaces the waiter instead')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Let up to N holders share KEY (a counting semaphore); every holder of KEY must use the same N')
            [CompletionResult]::new('--random-delay', '--random-delay', [CompletionResultType]::ParameterName, 'Sleep a random time below DURATION before the first attempt')
            [CompletionResult]::new('--on-unavailable', '--on-unavailable', [CompletionResultType]::ParameterName, 'When Redis is unavailable: `fail` (exit 69), or `run` COMMAND without a lock, with a warning')
            [CompletionResult]::new('--replicas', '--replicas', [CompletionResultType]::ParameterName, 'After acquiring and after each refresh, require N replicas to confirm the write (WAIT); `auto`: one when the primary has any acknowledging (a hung replica is not waited for)')
            [CompletionResult]::new('--warn-signal', '--warn-signal', [CompletionResultType]::ParameterName, 'Send SIG (USR1, TERM, a number...) to COMMAND''s process group --warn-before ahead of a planned stop: a lease that refreshes fail to renew, or --max-hold; not sent when there is no time')
            [CompletionResult]::new('--warn-before', '--warn-before', [CompletionResultType]::ParameterName, 'How long before the planned SIGTERM --warn-signal is sent')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'Run LINE with `sh -c` once after the lock was lost, as COMMAND is being stopped (REDLOCK_KEY, REDLOCK_FENCE, REDLOCK_LOST_REASON set); killed after 10s')
            [CompletionResult]::new('--contain', '--contain', [CompletionResultType]::ParameterName, 'How the end of COMMAND''s whole tree is held: `auto` puts it in a cgroup of its own where one can be made (cgroup v2, root or a delegated subtree), else leaves it to the keeper process; `cgroup` requires one (exit 71 without); `keeper` never makes one; `pid-namespace` adds a PID namespace whose init is the keeper, so that the kernel ends the tree even when redlock-run and its keeper are killed together (root only; COMMAND sees its pid as 2)')
            [CompletionResult]::new('--label', '--label', [CompletionResultType]::ParameterName, 'A label for this run, shown with it as holder or waiter (status, list, busy and waiting lines, JSON): a CI job''s URL, a ticket')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'While waiting for a busy lock, say so this often (0: only when it starts waiting); -q says nothing')
            [CompletionResult]::new('--metrics-textfile', '--metrics-textfile', [CompletionResultType]::ParameterName, 'Write the run''s metrics for node_exporter''s textfile collector into DIR (redlock_run_<KEY>.prom)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait for a busy lock (same as --wait 0; wins over --wait, as in flock)')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait for a busy lock (same as --wait 0; wins over --wait, as in flock)')
            [CompletionResult]::new('-x', '-x', [CompletionResultType]::ParameterName, 'An exclusive lock: the only kind, so this changes nothing; accepted for flock''s -x, -e, --exclusive')
            [CompletionResult]::new('--exclusive', '--exclusive', [CompletionResultType]::ParameterName, 'An exclusive lock: the only kind, so this changes nothing; accepted for flock''s -x, -e, --exclusive')
            [CompletionResult]::new('--replace-running', '--replace-running', [CompletionResultType]::ParameterName, 'Revoke the run that holds KEY (it is stopped as by force-release and exits 70, "replaced"), then run once its whole job has ended: CI''s cancel-in-progress. Waits for that end even with -n; never replaces a hold')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Take KEY shared (flock''s -s): any number of shared holders at once, and no exclusive (default) holder; a waiting exclusive run goes before shared runs that come after it')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Take KEY shared (flock''s -s): any number of shared holders at once, and no exclusive (default) holder; a waiting exclusive run goes before shared runs that come after it')
            [CompletionResult]::new('--allow-eviction', '--allow-eviction', [CompletionResultType]::ParameterName, 'Run even on a server that may evict the lock''s key (maxmemory with a maxmemory-policy other than noeviction), with a warning: two holders may then run at once')
            [CompletionResult]::new('--lease-file', '--lease-file', [CompletionResultType]::ParameterName, 'Give COMMAND REDLOCK_LEASE_FILE: a file (in a private directory) holding the lease''s end as Unix milliseconds, updated at each refresh')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds each KEY and for how long')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Show every held lock under the prefix')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until KEY is free, without taking it')
            [CompletionResult]::new('force-release', 'force-release', [CompletionResultType]::ParameterValue, 'Delete a lock by hand, saying whose it was')
            [CompletionResult]::new('hold', 'hold', [CompletionResultType]::ParameterValue, 'Take KEY with no command until --for has passed (a deploy freeze)')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'End a hold early (exit 0), 1 when KEY is not on hold')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check the servers for every setting that weakens a lock (eviction, persistence, replicas, rights, clock, Sentinel, Cluster); exit 78 on a FAIL, 69 when a server cannot be reached, 77 when one refuses us')
            [CompletionResult]::new('generate', 'generate', [CompletionResultType]::ParameterValue, 'Print the man page (roff) or a shell completion script on stdout')
            break
        }
        'redlock-run;status' {
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per key per line')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;list' {
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per lock per line (as status --json)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;wait' {
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'How long to wait: a duration, or `forever`; `0` looks once')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when KEY is still held at the timeout')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when KEY is still held at the timeout')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;force-release' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Delete only if the lock holds this token')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--now', '--now', [CompletionResultType]::ParameterName, 'Delete at once, without waiting for a live holder to stop its COMMAND first (a waiter may then run beside it); a lock that --min-hold keeps after its job ended is deleted at once anyway')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;hold' {
            [CompletionResult]::new('--for', '--for', [CompletionResultType]::ParameterName, 'How long the hold lasts; it expires by itself then')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why KEY is held (shown by status, list, and runs that find it held)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy KEY: a duration, or `forever`')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy KEY: a duration, or `forever`')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when KEY is still busy after --wait')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when KEY is still busy after --wait')
            [CompletionResult]::new('--label', '--label', [CompletionResultType]::ParameterName, 'A label shown with the hold (a ticket, an incident''s URL)')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;release' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Only the lock this token holds (as `hold` printed it)')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;doctor' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'The lock whose keys, channels and Cluster slot are checked')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'The lock whose keys, channels and Cluster slot are checked')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'The TTL the runs will use: it sets the per-node timeout and the clock''s drift allowance')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'The TTL the runs will use: it sets the per-node timeout and the clock''s drift allowance')
            [CompletionResult]::new('--replicas', '--replicas', [CompletionResultType]::ParameterName, 'The --replicas the runs will use: checks that many replicas and the right to WAIT [default: auto for Sentinel and Cluster URLs, else 0]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace of every key this tool writes')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate chain (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per check per line')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Print lock events on stderr')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;generate' {
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
