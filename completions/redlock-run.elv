
use builtin;
use str;

set edit:completion:arg-completer[redlock-run] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'redlock-run'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'redlock-run'= {
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand -k 'Lock name: any non-empty UTF-8 string without control characters'
            cand --key 'Lock name: any non-empty UTF-8 string without control characters'
            cand -t 'Lifetime of the lock in Redis; refreshed while COMMAND runs'
            cand --ttl 'Lifetime of the lock in Redis; refreshed while COMMAND runs'
            cand --refresh 'Refresh period; must be shorter than the TTL'
            cand -w 'How long to wait for a busy lock: seconds (10, 0.5), a duration (30s, 5m) or `forever`; `0` tries once'
            cand --wait 'How long to wait for a busy lock: seconds (10, 0.5), a duration (30s, 5m) or `forever`; `0` tries once'
            cand --period 'Cron: the schedule''s period (5m for */5); run once per period on however many hosts; implies -n'
            cand -E 'Exit code when the lock could not be had in time'
            cand --conflict-exit-code 'Exit code when the lock could not be had in time'
            cand -c 'Run LINE with `sh -c` instead of a trailing COMMAND'
            cand --command 'Run LINE with `sh -c` instead of a trailing COMMAND'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when COMMAND must be stopped; shorter than the TTL'
            cand --min-hold 'Keep the lock at least this long after acquiring it, even if COMMAND ends sooner (absorbs clock skew between cron hosts)'
            cand --max-hold 'Stop COMMAND if it still runs after this long; exit 124'
            cand --queue 'How waiters stand in line: `oldest-first`, `newest-first` (a new waiter goes to the front) or `newest-wins` (a new waiter replaces the older ones, which exit 79)'
            cand --queue-max 'At most N runs wait in line for KEY (1-10000): one more exits at once with the busy code; under `--queue newest-wins` a newcomer replaces the waiter instead'
            cand --limit 'Let up to N holders share KEY (a counting semaphore); every holder of KEY must use the same N'
            cand --random-delay 'Sleep a random time below DURATION before the first attempt'
            cand --on-unavailable 'When Redis is unavailable: `fail` (exit 69), or `run` COMMAND without a lock, with a warning'
            cand --replicas 'After acquiring and after each refresh, require N replicas to confirm the write (WAIT); `auto`: one when the primary has any acknowledging (a hung replica is not waited for)'
            cand --warn-signal 'Send SIG (USR1, TERM, a number...) to COMMAND''s process group --warn-before ahead of a planned stop: a lease that refreshes fail to renew, or --max-hold; not sent when there is no time'
            cand --warn-before 'How long before the planned SIGTERM --warn-signal is sent'
            cand --on-lost 'Run LINE with `sh -c` once after the lock was lost, as COMMAND is being stopped (REDLOCK_KEY, REDLOCK_FENCE, REDLOCK_LOST_REASON set); killed after 10s'
            cand --contain 'How the end of COMMAND''s whole tree is held: `auto` puts it in a cgroup of its own where one can be made (cgroup v2, root or a delegated subtree), else leaves it to the keeper process; `cgroup` requires one (exit 71 without); `keeper` never makes one; `pid-namespace` adds a PID namespace whose init is the keeper, so that the kernel ends the tree even when redlock-run and its keeper are killed together (root only; COMMAND sees its pid as 2)'
            cand --label 'A label for this run, shown with it as holder or waiter (status, list, busy and waiting lines, JSON): a CI job''s URL, a ticket'
            cand --progress 'While waiting for a busy lock, say so this often (0: only when it starts waiting); -q says nothing'
            cand --metrics-textfile 'Write the run''s metrics for node_exporter''s textfile collector into DIR (redlock_run_<KEY>.prom)'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -n 'Do not wait for a busy lock (same as --wait 0; wins over --wait, as in flock)'
            cand --no-wait 'Do not wait for a busy lock (same as --wait 0; wins over --wait, as in flock)'
            cand -x 'An exclusive lock: the only kind, so this changes nothing; accepted for flock''s -x, -e, --exclusive'
            cand --exclusive 'An exclusive lock: the only kind, so this changes nothing; accepted for flock''s -x, -e, --exclusive'
            cand -s 'Take KEY shared (flock''s -s): any number of shared holders at once, and no exclusive (default) holder; a waiting exclusive run goes before shared runs that come after it'
            cand --shared 'Take KEY shared (flock''s -s): any number of shared holders at once, and no exclusive (default) holder; a waiting exclusive run goes before shared runs that come after it'
            cand --allow-eviction 'Run even on a server that may evict the lock''s key (maxmemory with a maxmemory-policy other than noeviction), with a warning: two holders may then run at once'
            cand --lease-file 'Give COMMAND REDLOCK_LEASE_FILE: a file (in a private directory) holding the lease''s end as Unix milliseconds, updated at each refresh'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand status 'Show who holds each KEY and for how long'
            cand list 'Show every held lock under the prefix'
            cand wait 'Wait until KEY is free, without taking it'
            cand force-release 'Delete a lock by hand, saying whose it was'
            cand doctor 'Check the servers for every setting that weakens a lock (eviction, persistence, replicas, rights, clock, Sentinel, Cluster); exit 78 on a FAIL, 69 when a server cannot be reached, 77 when one refuses us'
            cand generate 'Print the man page (roff) or a shell completion script on stdout'
        }
        &'redlock-run;status'= {
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --json 'One JSON object per key per line'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;list'= {
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --json 'One JSON object per lock per line (as status --json)'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;wait'= {
            cand --timeout 'How long to wait: a duration, or `forever`; `0` looks once'
            cand -E 'Exit code when KEY is still held at the timeout'
            cand --conflict-exit-code 'Exit code when KEY is still held at the timeout'
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;force-release'= {
            cand --token 'Delete only if the lock holds this token'
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --now 'Delete at once, without waiting for a live holder to stop its COMMAND first (a waiter may then run beside it); a lock that --min-hold keeps after its job ended is deleted at once anyway'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;doctor'= {
            cand -k 'The lock whose keys, channels and Cluster slot are checked'
            cand --key 'The lock whose keys, channels and Cluster slot are checked'
            cand -t 'The TTL the runs will use: it sets the per-node timeout and the clock''s drift allowance'
            cand --ttl 'The TTL the runs will use: it sets the per-node timeout and the clock''s drift allowance'
            cand --replicas 'The --replicas the runs will use: checks that many replicas and the right to WAIT [default: auto for Sentinel and Cluster URLs, else 0]'
            cand --redis 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]'
            cand --prefix 'Namespace of every key this tool writes'
            cand --log-format 'How redlock-run''s own stderr lines are written: `text`, or `json` (one object per line)'
            cand --tls-ca 'CA certificates (PEM) to verify rediss:// servers with, instead of the system''s roots'
            cand --tls-cert 'Client certificate chain (PEM) for mutual TLS; needs --tls-key'
            cand --password-file 'Read the password of every URL that has none from FILE''s first line: then it is neither in `ps` nor in COMMAND''s environment'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --json 'One JSON object per check per line'
            cand -v 'Print lock events on stderr'
            cand --verbose 'Print lock events on stderr'
            cand -q 'Print nothing but errors'
            cand --quiet 'Print nothing but errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;generate'= {
            cand -h 'Print help'
            cand --help 'Print help'
        }
    ]
    $completions[$command]
}
