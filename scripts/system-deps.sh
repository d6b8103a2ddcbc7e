#!/usr/bin/env bash
# Installs the system packages the test suite (or, with the argument demo-here, just the demo)
# needs, when they are missing. Runs as root (CI does); as another user it only reports what
# is missing.
set -euo pipefail
target=${1:-test-here}

missing_cmds() {
    local out=()
    command -v bwrap >/dev/null || out+=(bwrap)
    ldconfig -p 2>/dev/null | grep -q 'libseccomp.so.2' || out+=(libseccomp)
    python3 -c 'import venv, ensurepip' 2>/dev/null || out+=(python3-venv)
    if [ "$target" = demo-here ]; then
        echo "${out[@]:-}"
        return
    fi
    command -v systemd-analyze >/dev/null || out+=(systemd-analyze)
    command -v systemd-socket-activate >/dev/null || out+=(systemd-socket-activate)
    # A real user manager for tests/packaging/test_systemd_user.py (scripts/user-manager.sh).
    command -v systemctl >/dev/null || out+=(systemctl)
    [ -x /lib/systemd/systemd ] || [ -x /usr/lib/systemd/systemd ] || out+=(systemd)
    command -v setsid >/dev/null || out+=(setsid)
    command -v makepkg >/dev/null || out+=(makepkg)
    command -v pacman >/dev/null || out+=(pacman)
    command -v bsdtar >/dev/null || out+=(bsdtar)
    command -v fakeroot >/dev/null || out+=(fakeroot)
    command -v runuser >/dev/null || out+=(runuser)
    command -v ssh-keygen >/dev/null || out+=(ssh-keygen)
    command -v unshare >/dev/null || out+=(unshare)
    # The egress tests: `ip` sets up the namespace standing for the internet, curl is the
    # client inside the sandbox.
    command -v ip >/dev/null || out+=(iproute2)
    command -v curl >/dev/null || out+=(curl)
    # The credential-grant test: the real GitHub CLI against a fake GitHub over TLS with a
    # CA the test makes (tests/sandbox/test_gh_grant.py).
    command -v gh >/dev/null || out+=(gh)
    command -v openssl >/dev/null || out+=(openssl)
    # Routine signatures (routines/signing.py): ssh-keygen -Y sign/verify.
    command -v ssh-keygen >/dev/null || out+=(ssh-keygen)
    command -v script >/dev/null || out+=(script)
    command -v zsh >/dev/null || out+=(zsh)      # the zsh and fish completion tests
    command -v fish >/dev/null || out+=(fish)
    # The dashboard's browser tests (Playwright drives the system's Chromium).
    command -v chromium >/dev/null || out+=(chromium)
    # The fleet tests start their own PostgreSQL cluster (initdb, pg_ctl; psycopg needs libpq).
    { ls /usr/lib/postgresql/*/bin/initdb || ls /usr/bin/initdb; } >/dev/null 2>&1 || out+=(postgresql)
    ldconfig -p 2>/dev/null | grep -q 'libpq.so.5' || out+=(libpq)
    echo "${out[@]:-}"
}

need=$(missing_cmds)
if [ -z "$need" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "system-deps: missing: $need" >&2
    echo "system-deps: run 'make test' as root once to install them, or install them with your package manager" >&2
    exit 1
fi

echo "system-deps: installing what provides: $need" >&2
if command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        bubblewrap libseccomp2 python3 python3-venv systemd \
        makepkg pacman-package-manager libarchive-tools fakeroot \
        util-linux bsdextrautils procps ca-certificates zsh fish chromium iproute2 curl openssh-client \
        postgresql libpq5 gh openssl >/dev/null
elif [ -x /usr/bin/pacman ] && [ -f /etc/arch-release ]; then
    # -Syu: Arch does not support partial upgrades.
    pacman -Syu --needed --noconfirm bubblewrap libseccomp python systemd base-devel util-linux procps-ng zsh fish chromium iproute2 curl openssh postgresql github-cli openssl >/dev/null
else
    echo "system-deps: no apt-get or Arch pacman here; install by hand: $need" >&2
    exit 1
fi

still=$(missing_cmds)
if [ -n "$still" ]; then
    echo "system-deps: still missing after install: $still" >&2
    exit 1
fi
