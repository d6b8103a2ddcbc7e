#!/usr/bin/env bash
# A CPU hog for `make test-load`: twice as many busy loops as the machine has cores, at the
# lowest priority, so the timing-sensitive tests run on a machine as loaded as a busy one.
#
#     scripts/cpu-hog.sh start PIDFILE    start them (in a process group of their own)
#     scripts/cpu-hog.sh stop PIDFILE     end that group, and only that group
set -euo pipefail
cmd=${1:?usage: cpu-hog.sh start|stop PIDFILE}
pidfile=${2:?usage: cpu-hog.sh start|stop PIDFILE}
case "$cmd" in
start)
    n=$(( $(nproc) * 2 ))
    # setsid: one new process group, led by the shell below, so `stop` ends every loop and
    # nothing else.
    setsid bash -c 'for _ in $(seq "$1"); do nice -n 19 bash -c "while :; do :; done" & done; wait' \
        hog "$n" </dev/null >/dev/null 2>&1 &
    echo $! >"$pidfile"
    echo "cpu-hog: $n busy loops (group $(cat "$pidfile"))" >&2
    ;;
stop)
    if [ -s "$pidfile" ]; then
        kill -TERM -- "-$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    fi
    ;;
*)
    echo "usage: cpu-hog.sh start|stop PIDFILE" >&2
    exit 2
    ;;
esac
