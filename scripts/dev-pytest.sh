#!/usr/bin/env bash
# For developers working as root in a shared checkout: runs pytest in place as the unprivileged
# user `vinos-test` (created if missing), without writing caches into the tree.
# Arguments go to pytest. As a non-root user it simply runs pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
    exec "$here/.venv/bin/pytest" "$@"
fi
user=${VINOS_TEST_USER:-vinos-test}
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
cd "$here"
# A second local user's listener, for the dashboard's squatting tests (scripts/second-user.sh).
second=$("$here/scripts/second-user.sh" start "$user")
trap '"$here/scripts/second-user.sh" stop "$second"' EXIT
runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" \
    PATH="$here/.venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb \
    PYTHONDONTWRITEBYTECODE=1 VINOS_TEST_READONLY_TREE=1 VINOS_SECOND_USER_SOCKET="$second" \
    "$here/.venv/bin/pytest" -p no:cacheprovider "$@"
