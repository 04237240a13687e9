"""Process 1 of a PID namespace that has no /proc of its own (the
foreign-proc fault: `unshare --pid --fork` without `--mount-proc`, as in a
container that sees the host's /proc). It starts COMMAND (setpriv, then
redlock-run), writes COMMAND's status to RCFILE as soon as it ends (the
harness's end of the run: a number, negative for a signal, as Popen's
returncode), then stays, as a container's init does, and reaps whatever
the job left behind until nothing is left below it.

usage: nsinit.py RCFILE -- COMMAND...
"""

import os
import sys


def main():
    rcfile = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 0
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            with open(rcfile + ".tmp", "w") as f:
                f.write(f"{code}\n")
            os.rename(rcfile + ".tmp", rcfile)


if __name__ == "__main__":
    sys.exit(main())
