#!/usr/bin/env bash
# Starts or stops a real systemd user manager (`systemd --user`) for USER, for
# tests/packaging/test_systemd_user.py. Root only; the tests themselves run as USER.
#
#   scripts/user-manager.sh start USER    # then `systemctl --user` works for USER
#   scripts/user-manager.sh stop USER     # the manager, its processes and its cgroups go away
#
# Containers and CI machines run no systemd as PID 1 and no logind, so nothing starts a user
# manager at login. What it needs, and what this provides:
# - /run/systemd/system, which tells systemd (sd_booted) that it may run as a manager;
# - a cgroup subtree of its own in each hierarchy it uses (hybrid: name=systemd and the
#   unified one; a pure cgroup2 machine has only the latter), owned by USER, with the
#   manager's first process in it;
# - /run/user/UID (its XDG_RUNTIME_DIR), owned by USER, mode 0700.
# Everything it creates is recorded under /run/vinos-user-manager/USER and undone by stop.
set -euo pipefail
action=${1:?usage: user-manager.sh start|stop USER}
user=${2:?usage: user-manager.sh start|stop USER}
uid=$(id -u "$user")
[ "$(id -u)" = 0 ] || { echo "user-manager: must run as root" >&2; exit 1; }
state=/run/vinos-user-manager/$user
runtime=/run/user/$uid
systemd_bin=
for b in /lib/systemd/systemd /usr/lib/systemd/systemd; do
    [ -x "$b" ] && { systemd_bin=$b; break; }
done

cgroup_roots() {
    local r
    for r in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
        # A cgroup2 root, or the named systemd hierarchy of v1.
        if [ -f "$r/cgroup.procs" ] && { [ "$r" != /sys/fs/cgroup ] ||
            [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; }; then
            echo "$r"
        fi
    done
}

as_user() {
    runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" \
        XDG_RUNTIME_DIR="$runtime" PATH=/usr/bin:/bin "$@"
}

# Every process in a cgroup subtree, deepest first.
subtree_pids() {
    find "$1" -depth -name cgroup.procs -exec cat {} + 2>/dev/null || true
}

start() {
    [ -n "$systemd_bin" ] || { echo "user-manager: no systemd binary" >&2; exit 1; }
    if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
        echo "user-manager: already running for $user (pid $(cat "$state/pid"))" >&2
        return 0
    fi
    mkdir -p "$state"
    if [ ! -d /run/systemd/system ]; then
        mkdir -p /run/systemd/system
        touch "$state/made-run-systemd-system"
    fi
    : >"$state/cgroups"
    local r
    for r in $(cgroup_roots); do
        mkdir -p "$r/vinos-user-$user"
        chown -R "$user:" "$r/vinos-user-$user"
        echo "$r/vinos-user-$user" >>"$state/cgroups"
    done
    if [ ! -d "$runtime" ]; then
        install -d -m 0700 -o "$user" -g "$(id -g "$user")" "$runtime"
        touch "$state/made-runtime"
    fi
    # The shell moves itself into the user's cgroups, then becomes the manager (as the user).
    setsid bash -c '
        for cg in $(cat "$1/cgroups"); do echo $$ >"$cg/cgroup.procs"; done
        exec runuser -u "$2" -- env -i HOME="$3" XDG_RUNTIME_DIR="$4" "$5" --user
    ' - "$state" "$user" "$(getent passwd "$user" | cut -d: -f6)" "$runtime" "$systemd_bin" \
        </dev/null >"$state/manager.log" 2>&1 &
    echo $! >"$state/pid"
    local i out=
    for i in $(seq 1 300); do
        out=$(as_user systemctl --user is-system-running 2>/dev/null || true)
        case $out in
            running|degraded) echo "user-manager: systemd --user for $user: $out" >&2; return 0 ;;
        esac
        kill -0 "$(cat "$state/pid")" 2>/dev/null || break
        sleep 0.2
    done
    echo "user-manager: the manager did not come up (last state: ${out:-none}); its log:" >&2
    cat "$state/manager.log" >&2 || true
    stop
    exit 1
}

stop() {
    [ -d "$state" ] || return 0
    local pid=
    [ -f "$state/pid" ] && pid=$(cat "$state/pid")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        # A user manager starts exit.target on SIGTERM: its units stop as they would at logout.
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 300); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
    fi
    local cg p
    if [ -f "$state/cgroups" ]; then
        for cg in $(cat "$state/cgroups"); do
            [ -d "$cg" ] || continue
            for p in $(subtree_pids "$cg"); do kill -KILL "$p" 2>/dev/null || true; done
        done
        for cg in $(cat "$state/cgroups"); do
            [ -d "$cg" ] || continue
            for _ in $(seq 1 50); do
                [ -z "$(subtree_pids "$cg")" ] && break
                sleep 0.1
            done
            find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
            [ -d "$cg" ] && echo "user-manager: could not remove $cg" >&2
        done
    fi
    if [ -f "$state/made-runtime" ]; then
        rm -rf "$runtime"
    fi
    if [ -f "$state/made-run-systemd-system" ]; then
        rmdir /run/systemd/system 2>/dev/null || true
    fi
    rm -rf "$state"
    rmdir /run/vinos-user-manager 2>/dev/null || true
}

case $action in
    start) start ;;
    stop) stop ;;
    *) echo "usage: user-manager.sh start|stop USER" >&2; exit 2 ;;
esac
