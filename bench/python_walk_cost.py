#!/usr/bin/env python3
# The BPF cost of the CPython frame walk per sample (docs/cpython.md, "Cost"): profiles one Python
# program with build/ember-agent --pid, then deletes and restores the process's `python_procs`
# entry with bpftool every WINDOW seconds (same process, same program) and reads the program's
# per-run times with build/bpf_run_times in each window. Prints the per-window medians and the
# median of each side. Needs root.
#
#   bench/python_walk_cost.py [--build build] [--hz 499] [--snapshot 0] [--windows 8]
#                             [--window 3] -- PYTHON SCRIPT [ARGS...]
#
# The script must wait for one byte on stdin before its work and run for at least
# windows * window + 6 seconds; TOTAL in ARGS is replaced by that, e.g.
#   bench/python_walk_cost.py -- /usr/bin/python3.11 tests/fixtures/python/phases.py TOTAL
import argparse
import json
import signal
import statistics
import subprocess
import sys
import time


def bpftool_json(*args):
    return json.loads(subprocess.check_output(["bpftool", "-j", *args]))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build")
    parser.add_argument("--hz", default="499")
    parser.add_argument("--snapshot", default="0", help="--stack-snapshot-bytes of the agent")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    total = str(int(args.windows * args.window + 6))
    command = [total if a == "TOTAL" else a for a in args.command]

    fixture = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    agent = subprocess.Popen(
        [f"{args.build}/ember-agent", "--pid", str(fixture.pid), "--sampling-hz", args.hz,
         "--stack-snapshot-bytes", args.snapshot, "--output-dir", "/tmp/ember-python-walk-cost",
         "--metrics-address", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        fixture.stdin.write(b"g")
        fixture.stdin.flush()
        time.sleep(2)  # the agent has seen the process and filled its entry
        programs = bpftool_json("prog", "show", "name", "profile__sample")
        program = (programs[-1] if isinstance(programs, list) else programs)["id"]
        map_id = [m["id"] for m in bpftool_json("map", "show") if m.get("name") == "python_procs"][-1]
        key = [f"{b:02x}" for b in fixture.pid.to_bytes(4, "little")]
        entry = bpftool_json("map", "lookup", "id", str(map_id), "key", "hex", *key)
        value = [v.replace("0x", "") for v in entry["value"]]
        medians = {True: [], False: []}
        for window in range(args.windows):
            walk = window % 2 == 0
            if walk:
                subprocess.run(["bpftool", "map", "update", "id", str(map_id), "key", "hex", *key,
                                "value", "hex", *value], check=True)
            else:
                subprocess.run(["bpftool", "map", "delete", "id", str(map_id), "key", "hex", *key],
                               check=True)
            time.sleep(0.2)
            times = subprocess.Popen([f"{args.build}/bpf_run_times", "--prog-id", str(program)],
                                     stdout=subprocess.PIPE, text=True)
            time.sleep(args.window)
            times.send_signal(signal.SIGINT)
            last = times.communicate()[0].strip().splitlines()[-1]
            fields = dict(pair.split("=") for pair in last.split())
            medians[walk].append(int(fields["median_ns"]))
    finally:
        agent.send_signal(signal.SIGINT)
        agent.wait()
        fixture.kill()
        fixture.wait()
    with_walk, without = statistics.median(medians[True]), statistics.median(medians[False])
    print(f"with the walk {medians[True]} ns, without {medians[False]} ns: median {with_walk:.0f} "
          f"vs {without:.0f} ns, added {with_walk - without:.0f} ns per sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
