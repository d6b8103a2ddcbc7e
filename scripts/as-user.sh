#!/usr/bin/env bash
# Runs `make TARGET` as an unprivileged user.
#
# vinos-routine refuses to run as root (tests/sandbox/test_sandbox_runner.py::
# test_running_as_root_is_refused): as uid 0 bwrap keeps host file access, so everything that runs a sandbox or the daemon must run unprivileged.
# As root (CI), this installs the system packages, creates the user `vinos-test`, copies the
# tree to a temp dir that user owns (it may not be able to read the clone's folder) and runs
# the target there. As any other user it runs the target in place.
set -euo pipefail
target=${1:?usage: as-user.sh TARGET}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" != 0 ]; then
    "$here/scripts/system-deps.sh" "$target"
    exec make -C "$here" "$target"
fi

"$here/scripts/system-deps.sh" "$target"
user=${VINOS_TEST_USER:-vinos-test}
if ! id "$user" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$user"
fi
work=$(mktemp -d /tmp/vinos-routine.XXXXXX)
tar -C "$here" --exclude=./.venv --exclude=./.venv-demo --exclude=./.git --exclude='*/__pycache__' \
    --exclude=./.mypy_cache --exclude=./.pytest_cache --exclude=./.ruff_cache -cf - . \
    | tar -C "$work" -xf -
chown -R "$user:" "$work"
chmod 0700 "$work"
second=
if [ "$target" = test-here ] || [ "$target" = test-fast-here ] || [ "$target" = test-load-here ]; then
    # A second local user's listener, for the squatting tests (the dashboard's, the sandbox
    # socket's).
    second=$("$here/scripts/second-user.sh" start "$user")
    trap '"$here/scripts/second-user.sh" stop "$second"' EXIT
fi
if [ "$target" = test-here ] || [ "$target" = bench-here ]; then
    # A real `systemd --user` for the user, for tests/packaging/test_systemd_user.py and the
    # systemd timer that bench/bench_command.py measures against; stopped (with its cgroups)
    # however the tests end.
    trap '"$here/scripts/user-manager.sh" stop "$user"; [ -z "$second" ] || "$here/scripts/second-user.sh" stop "$second"' EXIT
    "$here/scripts/user-manager.sh" start "$user"
fi
echo "as-user: running 'make $target' as $user in $work" >&2
status=0
runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" \
    PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM="${TERM:-dumb}" ${CI:+CI=$CI} \
    ${VINOS_BENCH_QUICK:+VINOS_BENCH_QUICK=$VINOS_BENCH_QUICK} \
    ${DEMO_SECONDS:+DEMO_SECONDS=$DEMO_SECONDS} ${PYTEST_ARGS:+PYTEST_ARGS="$PYTEST_ARGS"} \
    ${second:+VINOS_SECOND_USER_SOCKET=$second} \
    make -C "$work" "$target" || status=$?
if [ "$status" = 0 ] && [ -z "${VINOS_KEEP_WORK:-}" ] && [ "$target" != demo-here ]; then
    rm -rf "$work"
else
    # The demo's outputs are there to look at; a failure is there to inspect.
    echo "as-user: left $work (exit $status)" >&2
fi
exit "$status"
