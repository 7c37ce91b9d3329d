#!/usr/bin/env python3
"""Runs a command and writes its wait4() rusage to a file, as /usr/bin/time -f '%U %S %M' does but
in microseconds, not truncated to 10 ms: "USER_S SYS_S MAXRSS_KB". The kernel keeps user+sys
exact to the nanosecond (wait4 rounds it to microseconds), so a cost read as the difference of two
readings near the end of a run loses nothing to ticks.

  bench/rusage.py OUT COMMAND [ARGS...]

Exits as the command did (128 + the signal if a signal ended it). Like /usr/bin/time it ignores
SIGINT itself while it waits: a Ctrl-C reaches the command, which may stop cleanly and is still
measured."""
import os
import signal
import sys

if len(sys.argv) < 3:
    sys.exit("usage: bench/rusage.py OUT COMMAND [ARGS...]")
out, command = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"rusage.py: cannot run {command[0]}: {error.strerror}", file=sys.stderr)
        os._exit(127)
signal.signal(signal.SIGINT, signal.SIG_IGN)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    print(f"{usage.ru_utime:.6f} {usage.ru_stime:.6f} {usage.ru_maxrss}", file=f)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
