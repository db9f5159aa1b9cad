"""The pod side of a detached launch: the shell scripts the master execs in pod 0.

mpirun must outlive the master that started it (a `helm upgrade` of the master, an
evicted master pod), so it does not run under an exec session. `launch` starts it in a
session of its own (setsid, stdin from /dev/null, stdout and stderr into files of a
per-launch directory) under a small wrapper that writes its exit code beside them, and
returns at once. The files are then read with `stream` (two `tail -f` from byte offsets,
one per exec channel) by whichever master process watches the run; a master that comes
back reads on from the offsets the last one saved after storing its lines. Every process
of the launch carries LAUNCH_MARK in its environment, so it is found, and stopped, by
that marker alone: pids and session ids of a pod are not trusted after a restart.

Files of a launch directory: stdout.log, stderr.log, session (the wrapper's pid),
exit_code (written when mpirun ends; absent when the wrapper was killed), offsets
("STDOUT STDERR": bytes the master has stored).

The scripts need /bin/sh, setsid (util-linux), GNU tail (--pid), GNU grep (-z) and /proc,
all in the Debian-based worker image and images built FROM it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mlbench_master.cluster.kubernetes.names import LAUNCH_MARK

# Days a launch directory is kept in the pod's emptyDir (removed by a later launch).
KEEP_DAYS = 7

# Lists the pids whose environment carries this launch's marker ($id).
_MARKED = (
    f'marked() {{ grep -lzx "{LAUNCH_MARK}=$id" /proc/[0-9]*/environ 2>/dev/null '
    "| sed 's,^/proc/\\([0-9]*\\)/environ$,\\1,'; }"
)

# The session leader: records its pid, runs mpirun ("$@"), records the exit code atomically.
_WRAPPER = (
    'd=$0; echo $$ > "$d/session.tmp" && mv "$d/session.tmp" "$d/session"\n'
    '"$@"; code=$?\n'
    'echo "$code" > "$d/exit_code.tmp" && mv "$d/exit_code.tmp" "$d/exit_code"\n'
    'exit "$code"'
)

_LAUNCH = f"""set -e
dir=$1 id=$2
shift 2
while IFS= read -r line && [ -n "$line" ]; do export "$line"; done
if ! command -v setsid >/dev/null 2>&1; then
  echo "setsid (util-linux) is missing from the worker image" >&2; exit 127
fi
parent=${{dir%/*}}
mkdir -p "$parent"
find "$parent" -mindepth 1 -maxdepth 1 -type d -mtime +{KEEP_DAYS} -exec rm -rf {{}} + \\
  2>/dev/null || true
mkdir "$dir"
{LAUNCH_MARK}="$id" setsid sh -c {shlex.quote(_WRAPPER)} "$dir" "$@" \\
  </dev/null >"$dir/stdout.log" 2>"$dir/stderr.log" &
i=0
while [ ! -s "$dir/session" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
if [ ! -s "$dir/session" ]; then
  cat "$dir/stderr.log" >&2; echo "mpirun's wrapper did not start within 10 s" >&2; exit 1
fi
"""

# Nothing but the files' bytes may reach stdout and stderr: they are counted as offsets.
# The tails follow a watcher of this shell's own (reaped by it), not a process of the
# launch: a pod whose init reaps no orphans would keep the launch's zombies, and a zombie
# counts as alive to `tail --pid`. The watcher ends when the wrapper recorded the exit
# code, or when no process of the launch is left; the tails then read to the end and stop.
_STREAM = f"""dir=$1 id=$2 out=$3 err=$4
{_MARKED}
cd "$dir" 2>/dev/null || exit 3
(while [ ! -e exit_code ] && [ -n "$(marked)" ]; do sleep 0.5; done) </dev/null >/dev/null 2>&1 &
watcher=$!
exec 3<&0
(while IFS=' ' read -r a b; do
   printf '%s %s\\n' "$a" "$b" > offsets.tmp && mv offsets.tmp offsets
 done) <&3 >/dev/null 2>&1 &
saver=$!
tail -c +$((out + 1)) -f --pid=$watcher -s 0.2 stdout.log 2>/dev/null &
t1=$!
tail -c +$((err + 1)) -f --pid=$watcher -s 0.2 stderr.log >&2 2>/dev/null &
t2=$!
wait $t1
wait $t2
kill $saver 2>/dev/null
exit 0
"""

_PROBE = f"""dir=$1 id=$2
{_MARKED}
if [ ! -f "$dir/session" ]; then echo missing; exit 0; fi
offsets=$(cat "$dir/offsets" 2>/dev/null || true)
if [ -s "$dir/exit_code" ]; then state="ended $(cat "$dir/exit_code")"
elif [ -n "$(marked)" ]; then state="running -"
else state="ended -"; fi
echo "$state ${{offsets:-0 0}}"
"""

_SAVE = 'printf "%s %s\\n" "$2" "$3" > "$1/offsets.tmp" && mv "$1/offsets.tmp" "$1/offsets"'

_GONE = 'i=0; while [ -n "$(marked)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done'
_STOP = f"""id=$1
{_MARKED}
pids=$(marked)
[ -z "$pids" ] && exit 0
kill -TERM $pids 2>/dev/null
{_GONE}
pids=$(marked)
[ -z "$pids" ] && exit 0
kill -KILL $pids 2>/dev/null
{_GONE}
[ -z "$(marked)" ]
"""

# The names the scripts run under ($0): how they show in `ps`, and how tests tell them apart.
LAUNCH, STREAM, PROBE, SAVE, STOP = (
    "mlbench-launch",
    "mlbench-stream",
    "mlbench-probe",
    "mlbench-save-offsets",
    "mlbench-stop-launch",
)


def launch(directory: str, launch_id: str, argv: list[str]) -> list[str]:
    """Start `argv` detached, with the environment block read from stdin (the run's token
    travels there, not in the exec URL); exits once the wrapper runs."""
    return ["sh", "-c", _LAUNCH, LAUNCH, directory, launch_id, *argv]


def stream(directory: str, launch_id: str, stdout_offset: int, stderr_offset: int) -> list[str]:
    """stdout.log from `stdout_offset` on the exec's stdout, stderr.log on its stderr, until
    the launch has ended and both are read to their end (exit 0; 3: no such launch).
    Lines "STDOUT STDERR" written to its stdin are saved as the launch's offsets."""
    return [
        "sh",
        "-c",
        _STREAM,
        STREAM,
        directory,
        launch_id,
        str(stdout_offset),
        str(stderr_offset),
    ]


def probe(directory: str, launch_id: str) -> list[str]:
    """One line: "missing", or "running|ended CODE|- STDOUT STDERR" (see `Probe.parse`)."""
    return ["sh", "-c", _PROBE, PROBE, directory, launch_id]


def save_offsets(directory: str, stdout_offset: int, stderr_offset: int) -> list[str]:
    """Record the offsets when no stream is open to carry them."""
    return ["sh", "-c", _SAVE, SAVE, directory, str(stdout_offset), str(stderr_offset)]


def stop(launch_id: str) -> list[str]:
    """TERM every process of the launch, KILL what is left after 5 s; exit 0 once all are
    gone (also when none was left)."""
    return ["sh", "-c", _STOP, STOP, launch_id]


@dataclass(frozen=True)
class Probe:
    """What pod 0 says of a launch."""

    found: bool
    running: bool = False
    exit_code: int | None = None
    offsets: tuple[int, int] = (0, 0)

    @classmethod
    def parse(cls, answer: str) -> Probe:
        """Read `probe`'s line; ValueError when it is not one (a broken image, a shell
        that printed something else)."""
        words = answer.split()
        if words == ["missing"]:
            return cls(found=False)
        if len(words) != 4 or words[0] not in ("running", "ended"):
            raise ValueError(f"unexpected answer from the launch probe: {answer.strip()[:200]!r}")
        code = None if words[1] == "-" else int(words[1])
        return cls(
            found=True,
            running=words[0] == "running",
            exit_code=code,
            offsets=(int(words[2]), int(words[3])),
        )
