#!/usr/bin/env bash
# `make screenshots`: docs/screenshots/NAME.png and NAME.txt from tests/dashboard/shots.py.
# The daemon refuses root, so as root the pages are taken by the unprivileged user `vinos-test`
# (as scripts/dev-pytest.sh runs the tests) into a temp dir, then copied here.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
docs="$here/docs/screenshots"
if [ "$(id -u)" != 0 ]; then
    cd "$here"
    exec "$here/.venv/bin/python" -m tests.dashboard.shots "$docs"
fi
user=${VINOS_TEST_USER:-vinos-test}
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
out=$(mktemp -d /tmp/vinos-screenshots.XXXXXX)
trap 'rm -rf "$out"' EXIT
chown "$user:" "$out"
cd "$here"
runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" \
    PATH="$here/.venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb \
    PYTHONDONTWRITEBYTECODE=1 "$here/.venv/bin/python" -m tests.dashboard.shots "$out"
cp "$out"/*.png "$out"/*.txt "$docs/"
echo "copied to $docs"
