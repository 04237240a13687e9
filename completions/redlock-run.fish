# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_run_global_optspecs
    string join \n redis= prefix= v/verbose q/quiet log-format= tls-ca= tls-cert= password-file= tls-key= k/key= t/ttl= refresh= w/wait= n/no-wait x/exclusive period= E/conflict-exit-code= c/command= kill-after= min-hold= max-hold= queue= queue-max= replace-running s/shared limit= random-delay= on-unavailable= replicas= allow-eviction warn-signal= warn-before= on-lost= lease-file contain= label= progress= metrics-textfile= h/help V/version
end

function __fish_redlock_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_run_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_run_using_subcommand
    set -l cmd (__fish_redlock_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock-run -n "__fish_redlock_run_needs_command" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s k -l key -d 'Lock name: any non-empty UTF-8 string without control characters; repeat it to hold several keys, all or nothing' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s t -l ttl -d 'Lifetime of the lock in Redis; refreshed while COMMAND runs' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l refresh -d 'Refresh period; must be shorter than the TTL' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s w -l wait -d 'How long to wait for a busy lock: seconds (10, 0.5), a duration (30s, 5m) or `forever`; `0` tries once' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l period -d 'Cron: the schedule\'s period (5m for */5); run once per period on however many hosts; implies -n' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s E -l conflict-exit-code -d 'Exit code when the lock could not be had in time' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s c -l command -d 'Run LINE with `sh -c` instead of a trailing COMMAND' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l kill-after -d 'Grace between SIGTERM and SIGKILL when COMMAND must be stopped; shorter than the TTL' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l min-hold -d 'Keep the lock at least this long after acquiring it, even if COMMAND ends sooner (absorbs clock skew between cron hosts)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-hold -d 'Stop COMMAND if it still runs after this long; exit 124' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l queue -d 'How waiters stand in line: `oldest-first`, `newest-first` (a new waiter goes to the front) or `newest-wins` (a new waiter replaces the older ones, which exit 79)' -r -f -a "oldest-first\t'At the end: waiters are served in order of arrival'
newest-first\t'At the front: the newest waiter is served first'
newest-wins\t'Alone: every older waiter leaves at once (exit 79), so only the newest is served (CI: deploy only the latest pipeline)'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l queue-max -d 'At most N runs wait in line for KEY (1-10000): one more exits at once with the busy code; under `--queue newest-wins` a newcomer replaces the waiter instead' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l limit -d 'Let up to N holders share KEY (a counting semaphore); every holder of KEY must use the same N' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l random-delay -d 'Sleep a random time below DURATION before the first attempt' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l on-unavailable -d 'When Redis is unavailable: `fail` (exit 69), or `run` COMMAND without a lock, with a warning' -r -f -a "fail\t'Exit 69; COMMAND does not run'
run\t'Run COMMAND without a lock, after a warning'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l replicas -d 'After acquiring and after each refresh, require N replicas to confirm the write (WAIT); `auto`: one when the primary has any acknowledging (a hung replica is not waited for)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l warn-signal -d 'Send SIG (USR1, TERM, a number...) to COMMAND\'s process group --warn-before ahead of a planned stop: a lease that refreshes fail to renew, or --max-hold; not sent when there is no time' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l warn-before -d 'How long before the planned SIGTERM --warn-signal is sent' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l on-lost -d 'Run LINE with `sh -c` once after the lock was lost, as COMMAND is being stopped (REDLOCK_KEY, REDLOCK_FENCE, REDLOCK_LOST_REASON set); killed after 10s' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l contain -d 'How the end of COMMAND\'s whole tree is held: `auto` puts it in a cgroup of its own where one can be made (cgroup v2, root or a delegated subtree), else leaves it to the keeper process; `cgroup` requires one (exit 71 without); `keeper` never makes one; `pid-namespace` adds a PID namespace whose init is the keeper, so that the kernel ends the tree even when redlock-run and its keeper are killed together (root only; COMMAND sees its pid as 2)' -r -f -a "auto\t'A cgroup where one can be made, else the keeper alone'
cgroup\t'A cgroup, or exit 71'
keeper\t'The keeper alone'
pid-namespace\t'A cgroup where one can be made, and a PID namespace whose init is the keeper (the kernel ends the job when the keeper dies, whoever killed it); COMMAND sees its own pid as 2. Exit 71 without one'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l label -d 'A label for this run, shown with it as holder or waiter (status, list, busy and waiting lines, JSON): a CI job\'s URL, a ticket' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l progress -d 'While waiting for a busy lock, say so this often (0: only when it starts waiting); -q says nothing' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l metrics-textfile -d 'Write the run\'s metrics for node_exporter\'s textfile collector into DIR (redlock_run_<KEY>.prom)' -r -f -a "(__fish_complete_directories)"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s n -l no-wait -d 'Do not wait for a busy lock (same as --wait 0; wins over --wait, as in flock)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s x -l exclusive -d 'An exclusive lock: the only kind, so this changes nothing; accepted for flock\'s -x, -e, --exclusive'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l replace-running -d 'Revoke the run that holds KEY (it is stopped as by force-release and exits 70, "replaced"), then run once its whole job has ended: CI\'s cancel-in-progress. Waits for that end even with -n; never replaces a hold'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s s -l shared -d 'Take KEY shared (flock\'s -s): any number of shared holders at once, and no exclusive (default) holder; a waiting exclusive run goes before shared runs that come after it'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l allow-eviction -d 'Run even on a server that may evict the lock\'s key (maxmemory with a maxmemory-policy other than noeviction), with a warning: two holders may then run at once'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l lease-file -d 'Give COMMAND REDLOCK_LEASE_FILE: a file (in a private directory) holding the lease\'s end as Unix milliseconds, updated at each refresh'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s V -l version -d 'Print version'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "status" -d 'Show who holds each KEY and for how long'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "list" -d 'Show every held lock under the prefix'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "wait" -d 'Wait until KEY is free, without taking it'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "force-release" -d 'Delete a lock by hand, saying whose it was'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "hold" -d 'Take KEY with no command until --for has passed (a deploy freeze)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "release" -d 'End a hold early (exit 0), 1 when KEY is not on hold'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "doctor" -d 'Check the servers for every setting that weakens a lock (eviction, persistence, replicas, rights, clock, Sentinel, Cluster); exit 78 on a FAIL, 69 when a server cannot be reached, 77 when one refuses us'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "generate" -d 'Print the man page (roff) or a shell completion script on stdout'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l json -d 'One JSON object per key per line'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l json -d 'One JSON object per lock per line (as status --json)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l timeout -d 'How long to wait: a duration, or `forever`; `0` looks once' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -s E -l conflict-exit-code -d 'Exit code when KEY is still held at the timeout' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l token -d 'Delete only if the lock holds this token' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -l now -d 'Delete at once, without waiting for a live holder to stop its COMMAND first (a waiter may then run beside it); a lock that --min-hold keeps after its job ended is deleted at once anyway'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand force-release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l for -d 'How long the hold lasts; it expires by itself then' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l reason -d 'Why KEY is held (shown by status, list, and runs that find it held)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -s w -l wait -d 'How long to wait for a busy KEY: a duration, or `forever`' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -s E -l conflict-exit-code -d 'Exit code when KEY is still busy after --wait' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l label -d 'A label shown with the hold (a ticket, an incident\'s URL)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l token -d 'Only the lock this token holds (as `hold` printed it)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -s k -l key -d 'The lock whose keys, channels and Cluster slot are checked' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -s t -l ttl -d 'The TTL the runs will use: it sets the per-node timeout and the clock\'s drift allowance' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l replicas -d 'The --replicas the runs will use: checks that many replicas and the right to WAIT [default: auto for Sentinel and Cluster URLs, else 0]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l redis -d 'Redis server URL; repeat for a Redlock quorum of independent masters [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l prefix -d 'Namespace of every key this tool writes' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l log-format -d 'How redlock-run\'s own stderr lines are written: `text`, or `json` (one object per line)' -r -f -a "text\t'`redlock-run: message`'
json\t'One JSON object per line'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l tls-ca -d 'CA certificates (PEM) to verify rediss:// servers with, instead of the system\'s roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l tls-cert -d 'Client certificate chain (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l password-file -d 'Read the password of every URL that has none from FILE\'s first line: then it is neither in `ps` nor in COMMAND\'s environment' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -l json -d 'One JSON object per check per line'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -s v -l verbose -d 'Print lock events on stderr'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -s q -l quiet -d 'Print nothing but errors'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand generate" -s h -l help -d 'Print help'
