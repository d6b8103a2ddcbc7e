#!/usr/bin/env bash
# Starts or stops a second local user's listener (tests/helpers/squatter.py) for the dashboard
# tests that play "another user on this machine" (tests/dashboard/test_dashboard_squatter.py).
# Root only; the tests run as USER and talk to the helper over a Unix socket.
#
#   scripts/second-user.sh start USER    # prints the helper's socket path
#   scripts/second-user.sh stop SOCKET
#
# The suite's user cannot become another user, and a faked /proc would prove nothing, so
# root starts the helper, before the tests, as the user `vinos-test2` (created if missing):
# its sockets belong to that uid as an attacker's would. Each start has its own directory
# under /run/vinos-second-user, so parallel runs of the tests do not share a helper.
set -euo pipefail
action=${1:?usage: second-user.sh start USER | stop SOCKET}
arg=${2:?usage: second-user.sh start USER | stop SOCKET}
[ "$(id -u)" = 0 ] || { echo "second-user: must run as root" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
second=${VINOS_SECOND_USER:-vinos-test2}

start() {
    local allow dir
    allow=$(id -u "$arg")
    id "$second" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$second" \
        2>/dev/null || id "$second" >/dev/null
    mkdir -p /run/vinos-second-user
    chmod 0755 /run/vinos-second-user
    dir=$(mktemp -d /run/vinos-second-user/XXXXXX)
    # The helper is copied out of the tree: USER's copy of the tree may be 0700.
    install -m 0644 "$here/tests/helpers/squatter.py" "$dir/squatter.py"
    chmod 0755 "$dir"
    # Root's files (pid, log) stay in root's dir; the helper writes only its socket, in s/.
    install -d -m 0755 -o "$second" -g "$(id -g "$second")" "$dir/s"
    setsid runuser -u "$second" -- env -i PATH=/usr/bin:/bin /usr/bin/python3 -I \
        "$dir/squatter.py" "$dir/s/squatter.sock" --allow-uid "$allow" \
        </dev/null >"$dir/ready" 2>"$dir/log" &
    echo $! >"$dir/pid"
    for _ in $(seq 1 100); do
        grep -q ready "$dir/ready" 2>/dev/null && { echo "$dir/s/squatter.sock"; return 0; }
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
        sleep 0.1
    done
    echo "second-user: the helper did not start; its log:" >&2
    cat "$dir/log" >&2 || true
    stop_dir "$dir"
    exit 1
}

stop_dir() {
    local dir=$1 pid
    case $dir in /run/vinos-second-user/?*) ;; *) echo "second-user: not a helper dir: $dir" >&2; exit 1 ;; esac
    [ -d "$dir" ] || return 0
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    # runuser's child is the helper: both go (the pid is runuser's, in its own session).
    if [ -n "$pid" ]; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$dir"
}

case $action in
    start) start ;;
    stop) stop_dir "$(dirname "$(dirname "$arg")")" ;;
    *) echo "usage: second-user.sh start USER | stop SOCKET" >&2; exit 2 ;;
esac
