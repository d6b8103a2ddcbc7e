#!/usr/bin/env bash
# Installs the system packages the test suite (or, with the argument demo-here, just the demo)
# needs, when they are missing. Runs as root (CI does); as another user it only reports what
# is missing and the exact packages that provide it, for the target asked for only (the demo
# needs bwrap, libseccomp and a Python with venv, never Chromium or PostgreSQL).
set -euo pipefail
target=${1:-test-here}

# A normal user's PATH on Debian has no /sbin, where ldconfig lives: ask it by absolute path
# (tests/test_make_demo.py runs `make demo` with a Debian user's PATH).
has_library() {
    local ld
    for ld in /sbin/ldconfig /usr/sbin/ldconfig /usr/bin/ldconfig; do
        if [ -x "$ld" ]; then
            # grep reads it all (no -q): under pipefail, grep -q leaving at the first match
            # made ldconfig die of SIGPIPE now and then, and the library read as missing.
            "$ld" -p 2>/dev/null | grep -F "$1" >/dev/null && return 0
            return 1
        fi
    done
    # No ldconfig at all: look for the file where distributions put it.
    compgen -G "/usr/lib*/$1*" >/dev/null || compgen -G "/usr/lib/*-linux-gnu/$1*" >/dev/null
}

missing_cmds() {
    local out=()
    command -v bwrap >/dev/null || out+=(bwrap)
    has_library 'libseccomp.so.2' || out+=(libseccomp)
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
    command -v unshare >/dev/null || out+=(unshare)
    command -v nsenter >/dev/null || out+=(nsenter)  # the kernel-kept quota (sandbox/overlay.py)
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
    # The MCP tests run two reference servers from the npm registry (tests/worker/conftest.py).
    command -v npm >/dev/null || out+=(npm)
    # The dashboard's browser tests (Playwright drives the system's Chromium).
    command -v chromium >/dev/null || out+=(chromium)
    # The fleet tests start their own PostgreSQL cluster (initdb, pg_ctl; psycopg needs libpq).
    { ls /usr/lib/postgresql/*/bin/initdb || ls /usr/bin/initdb; } >/dev/null 2>&1 || out+=(postgresql)
    has_library 'libpq.so.5' || out+=(libpq)
    if [ "$target" = test-models-here ]; then
        # llama-server is built from source (scripts/llama_server.py).
        command -v cmake >/dev/null || out+=(cmake)
        command -v g++ >/dev/null || out+=(g++)
    fi
    echo "${out[@]:-}"
}

# The package that provides each missing item: $1 is debian or arch.
package_for() {
    local distro=$1 item=$2
    case "$distro:$item" in
        debian:bwrap) echo bubblewrap ;;
        debian:libseccomp) echo libseccomp2 ;;
        debian:python3-venv) echo python3-venv ;;
        debian:systemd-analyze | debian:systemctl | debian:systemd) echo systemd ;;
        debian:systemd-socket-activate) echo systemd ;;
        debian:setsid | debian:runuser | debian:unshare | debian:nsenter) echo util-linux ;;
        debian:makepkg) echo makepkg ;;
        debian:pacman) echo pacman-package-manager ;;
        debian:bsdtar) echo libarchive-tools ;;
        debian:ssh-keygen) echo openssh-client ;;
        debian:script) echo bsdextrautils ;;
        debian:libpq) echo libpq5 ;;
        arch:g++) echo gcc ;;
        arch:bwrap) echo bubblewrap ;;
        arch:python3-venv) echo python ;;
        arch:systemd-analyze | arch:systemctl | arch:systemd) echo systemd ;;
        arch:systemd-socket-activate) echo systemd ;;
        arch:setsid | arch:runuser | arch:unshare | arch:nsenter | arch:script) echo util-linux ;;
        arch:makepkg | arch:fakeroot) echo base-devel ;;
        arch:bsdtar) echo libarchive ;;
        arch:ssh-keygen) echo openssh ;;
        arch:libpq) echo postgresql-libs ;;
        *) echo "$item" ;;
    esac
}

# "sudo apt-get install …" (or pacman's) for exactly the missing items, each package once.
install_hint() {
    local distro cmd pkgs=() item pkg
    if [ -x /usr/bin/apt-get ]; then
        distro=debian cmd="sudo apt-get install"
    elif [ -x /usr/bin/pacman ] && [ -f /etc/arch-release ]; then
        distro=arch cmd="sudo pacman -S --needed"
    else
        echo "install what provides them with your package manager"
        return
    fi
    for item in "$@"; do
        pkg=$(package_for "$distro" "$item")
        case " ${pkgs[*]:-} " in *" $pkg "*) ;; *) pkgs+=("$pkg") ;; esac
    done
    echo "$cmd ${pkgs[*]}"
}

need=$(missing_cmds)
if [ -z "$need" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    # shellcheck disable=SC2086  # one word per missing item
    hint=$(install_hint $need)
    echo "system-deps: missing for 'make ${target%-here}': $need" >&2
    echo "system-deps: install them with: $hint" >&2
    if [ "$target" != demo-here ]; then
        echo "system-deps: (or run 'make test' as root once: it installs them)" >&2
    fi
    exit 1
fi

echo "system-deps: installing what provides: $need" >&2
if command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if [ "$target" = demo-here ]; then
        apt-get install -y -qq --no-install-recommends bubblewrap libseccomp2 python3 python3-venv >/dev/null
    else
        apt-get install -y -qq --no-install-recommends \
            bubblewrap libseccomp2 python3 python3-venv systemd \
            makepkg pacman-package-manager libarchive-tools fakeroot \
            util-linux bsdextrautils procps ca-certificates zsh fish chromium iproute2 curl openssh-client \
            postgresql libpq5 gh openssl >/dev/null
        # Only when missing: a machine's own Node.js (a vendor's nodejs ships its npm) would
        # conflict with Debian's npm package.
        command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
        if [ "$target" = test-models-here ]; then
            apt-get install -y -qq --no-install-recommends cmake g++ >/dev/null
        fi
    fi
elif [ -x /usr/bin/pacman ] && [ -f /etc/arch-release ]; then
    # -Syu: Arch does not support partial upgrades.
    if [ "$target" = demo-here ]; then
        pacman -Syu --needed --noconfirm bubblewrap libseccomp python >/dev/null
    else
        pacman -Syu --needed --noconfirm bubblewrap libseccomp python systemd base-devel util-linux procps-ng zsh fish chromium iproute2 curl openssh postgresql github-cli openssl npm >/dev/null
        if [ "$target" = test-models-here ]; then
            pacman -S --needed --noconfirm cmake gcc >/dev/null
        fi
    fi
else
    echo "system-deps: no apt-get or Arch pacman here; install by hand: $need" >&2
    exit 1
fi

still=$(missing_cmds)
if [ -n "$still" ]; then
    echo "system-deps: still missing after install: $still" >&2
    exit 1
fi
