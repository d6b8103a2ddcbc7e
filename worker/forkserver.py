"""The forkserver: one single-threaded process with the worker's modules imported (the SDKs'
~1.6 s of import, paid once), that forks each run's worker. `python -P -m worker.forkserver FD`,
started by the daemon (supervisor/engine/forkserver.py) with FD its end of an inherited socketpair:
the only way in. The daemon itself never imports an SDK or `worker`.

Protocol (SOCK_SEQPACKET, one JSON object a datagram):
  → us      {"argv", "env", "umask", "rlimits"} with SCM_RIGHTS [stdin, stdout, stderr, cwd]
  ← daemon  {"ready": true} once, after the preload; {"pid": N} or {"error": "..."} for each
            request, in order; {"exit": N, "code": C} when child N is reaped (C as
            `Popen.returncode`: negative for a signal)
EOF on the socket: fork no more, wait for the children, exit.

Invariant (a forked worker starts as a spawned one would; tests/supervisor/
test_forkserver.py holds each line): the child calls setsid (its own session and process
group), gets exactly the three stdio fds the daemon sent and nothing else (the socket, the
wake pipe and anything an import opened are closed), fchdir's to the daemon's cwd, takes
the daemon's umask, rlimits and environment (os.environ replaced, TZ re-read), the signal
dispositions and mask this interpreter had before it changed any, and a re-seeded `random`;
it sets its own PR_SET_PDEATHSIG (worker.main), here against this process, which has one
against the daemon, so a worker still dies with its supervisor. The one difference: where
this host builds overlays, the child keeps the close-on-exec channel to the overlay maker
this process started (sandbox/overlay.py share_maker), so its first shell call or command
does not start a maker of its own. Nothing of a run passes
through this process: the job goes from the daemon straight into the child's stdin, and no
child is forked from another, so no run sees another's state. The preload opens no connection
and reads no key (a module that did would be a bug here: `serve` refuses to start when an
import left a thread running or a descriptor open).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from sandbox.overlay import SharedMaker

__all__ = ["COMMAND_PRELOAD", "PRELOAD", "main", "serve"]

# What a run imports (the Anthropic, Ollama and OpenAI-compatible routes, shell tools, a
# command routine, the process set-up); each once, here, before any fork. An import that
# started a thread or left a descriptor open would stop `serve` (test_forkserver.py).
# openai costs the forkserver ~0.2 s of CPU and ~12 MB (shared with every child until
# written) on top of anthropic's ~1.4 s; left out, each run on an OpenAI-compatible route
# would pay the same 0.2 s itself. Runs on other routes never touch it.
PRELOAD = (
    "anthropic",
    "openai",
    "ctypes",
    "setproctitle",
    "routines.spec.loader",
    "routines.store",
    "sandbox",
    "worker.main",
    "worker.agent",
    "worker.channel",
    "worker.commandroutine",
    "worker.lease",
    "worker.providers.anthropic",
    "worker.providers.ollama",
    "worker.providers.openai",
    "worker.shellpolicy",
    "worker.tools",
)
# What only an agent run imports: left out with `--commands`, the daemon's choice while every
# routine it has is a command (supervisor/engine/forkserver.py's needs_sdk). A command run
# imports none of it, and it is ~1.5 of the preload's ~1.8 s of CPU
# (tests/supervisor/test_forkserver.py::test_a_commands_forkserver_is_replaced_for_the_sdk).
AGENT_ONLY = frozenset(
    {
        "anthropic",
        "openai",
        "worker.agent",
        "worker.providers.anthropic",
        "worker.providers.ollama",
        "worker.providers.openai",
        "worker.tools",
    }
)
COMMAND_PRELOAD = tuple(name for name in PRELOAD if name not in AGENT_ONLY)
MODES = {(): PRELOAD, ("--commands",): COMMAND_PRELOAD, ("--bare",): ()}
MAX_REQUEST = 1 << 20
EXIT_CRASH = 70


def main(argv: list[str]) -> int:
    if not argv or not argv[-1].isdigit() or tuple(argv[:-1]) not in MODES:
        print("usage: python -m worker.forkserver [--commands | --bare] FD", file=sys.stderr)
        return 2
    ctl = socket.socket(fileno=int(argv[-1]))
    # An inherited socketpair: the peer is the daemon that started us, same uid. Checked all
    # the same, so a descriptor handed in by anything else is refused.
    pid, uid, _ = struct.unpack("3i", ctl.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid() or pid != os.getppid():
        print(f"forkserver: the control socket's peer is pid {pid} uid {uid}", file=sys.stderr)
        return 2
    from worker import process

    process.die_with_parent()  # the daemon gone: so are we, and through us every worker
    # Each run's environment (a key among it) passes through here on its way to the child:
    # no other process of the user reads our memory or /proc files, as for the worker itself
    # (test_forkserver.py::test_a_forked_worker_starts_in_the_state_of_a_spawned_one).
    process.no_dumping()
    process.set_title_text("vinos-routine forkserver")
    # --commands: what a command run imports, no SDK; --bare: nothing preloaded (tests of
    # stand-in workers, which need none of the SDK).
    return serve(ctl, MODES[tuple(argv[:-1])])


def _pristine() -> tuple[dict[int, Any], set[int]]:
    """The signal dispositions and mask as the interpreter set them up, before we change any."""
    handlers: dict[int, Any] = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handlers[sig] = signal.getsignal(sig)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return handlers, set(mask)


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def serve(ctl: socket.socket, preload: tuple[str, ...] = PRELOAD) -> int:
    pristine = _pristine()
    before = _open_fds()
    for name in preload:
        __import__(name)
    if preload:
        _warm()
    leaked = _open_fds() - before
    if threading.active_count() != 1 or leaked:
        # fork() copies one thread only, and every descriptor: refuse rather than fork either.
        print(
            f"forkserver: the preload left {threading.active_count()} thread(s) and "
            f"descriptors {sorted(leaked)} open; not serving",
            file=sys.stderr,
        )
        return 1
    # After the check above: the maker's channel is the one descriptor a fork keeps.
    shared = _share_overlay_maker() if preload else None
    maker = None if shared is None else shared.fd
    maker_pid = None if shared is None else shared.pid
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd does the work
    children: set[int] = set()
    accepting = True
    ctl.send(b'{"ready": true}')
    while accepting or children:
        ready, _, _ = select.select([ctl.fileno(), wake_r] if accepting else [wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
        if ctl.fileno() in ready:
            try:
                data, fds, _, _ = socket.recv_fds(ctl, MAX_REQUEST, 4)
            except OSError:
                data, fds = b"", []
            if not data:
                accepting = False
            else:
                reply = _fork(data, fds, ctl, (wake_r, wake_w), pristine, maker)
                if isinstance(reply, int):
                    children.add(reply)
                    _send(ctl, {"pid": reply})
                else:
                    _send(ctl, {"error": reply})
        if maker_pid is not None and _reaped({maker_pid}):
            maker_pid = None  # it died: reaped, and each run starts its own (overlay.py)
        for pid, status in _reaped(children):
            children.discard(pid)
            _send(ctl, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
    return 0


def _warm() -> None:
    """Work every run would repeat with the same result, done once before any fork: the
    seccomp filter (a pure function of RULES and this machine's architecture, no secret in
    it; compiling it costs a command run ~35 ms). A machine without libseccomp is left for
    the run to report, as a spawned worker would."""
    from sandbox import seccomp

    with contextlib.suppress(seccomp.SeccompUnavailable):
        seccomp.bpf()


def _share_overlay_maker() -> SharedMaker | None:
    """The overlay maker every forked run asks for its calls' overlays (sandbox/overlay.py
    share_maker), started once here; None: none on this host, or it failed to start, and
    each run starts its own as a spawned one does."""
    from sandbox import overlay

    try:
        return overlay.share_maker()
    except (OSError, ValueError) as exc:
        print(f"forkserver: no shared overlay maker: {exc}", file=sys.stderr)
        return None


def _reaped(children: set[int]) -> list[tuple[int, int]]:
    out = []
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                out.append((got, status))
    return out


def _send(ctl: socket.socket, msg: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the daemon gone: our PDEATHSIG follows
        ctl.send(json.dumps(msg).encode())


def _fork(
    data: bytes,
    fds: list[int],
    ctl: socket.socket,
    wake: tuple[int, int],
    pristine: tuple[dict[int, Any], set[int]],
    maker: int | None = None,
) -> int | str:
    """Fork one worker for a request: its pid, or why not."""
    try:
        try:
            req = json.loads(data)
            argv, env = req["argv"], req["env"]
            if len(fds) != 4 or not _program(argv) or not isinstance(env, dict):
                return f"a malformed request ({len(fds)} fds, argv {argv!r})"
            sys.stdout.flush()
            sys.stderr.flush()
            # The pid is answered only once the child is its own process group: a stop sent
            # at once (killpg(pid)) must reach it, as it reaches a spawned worker, whose
            # setsid precedes its exec (test_spawn.py::test_a_worker_past_its_timeout_is_ended).
            grouped_r, grouped_w = os.pipe2(os.O_CLOEXEC)
            pid = os.fork()
        except (ValueError, KeyError, TypeError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        if pid == 0:
            os.close(grouped_r)
            _child(req, fds, ctl, wake, pristine, grouped_w, maker)
        os.close(grouped_w)
        try:
            os.read(grouped_r, 1)  # a byte after its setsid, or EOF if it died before
        finally:
            os.close(grouped_r)
        return pid
    finally:
        for fd in fds:
            os.close(fd)


def _program(argv: object) -> list[str] | None:
    """`argv` as this interpreter runs it: ["-m", MODULE, args...] or [SCRIPT, args...] (after
    an optional -P); None for anything else (another interpreter, other flags). The daemon
    alone writes it: a worker's (`-m worker`), or `-m worker.sandboxcli NAME -- CMD...` for a
    `vinos-routine sandbox` it was handed (supervisor/control/sandboxsock.py)."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    if len(argv) < 2 or argv[0] != sys.executable:
        return None
    rest = argv[1:]
    if rest[0] == "-P":
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return rest
    if rest and not rest[0].startswith("-"):
        return rest
    return None


def _child(
    req: dict[str, Any],
    fds: list[int],
    ctl: socket.socket,
    wake: tuple[int, int],
    pristine: tuple[dict[int, Any], set[int]],
    grouped: int,
    maker: int | None,
) -> NoReturn:
    code = EXIT_CRASH
    died_of: signal.Signals | None = None
    try:
        try:
            os.setsid()  # as start_new_session=True: its own group, signalled as one
        finally:
            os.write(grouped, b".")
            os.close(grouped)
        signal.set_wakeup_fd(-1)
        handlers, mask = pristine
        for sig, handler in handlers.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        stdin, stdout, stderr, cwd = fds
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.fchdir(cwd)
        ctl.detach()  # its fd is closed below; the object must not close a reused number
        # Every descriptor but stdio goes, except the shared overlay maker's channel
        # (close-on-exec: it reaches no program the run starts).
        top = os.sysconf("SC_OPEN_MAX")
        os.closerange(3, maker if maker is not None else top)
        if maker is not None:
            os.closerange(maker + 1, top)
        os.umask(int(req["umask"]))
        for res, soft, hard in req["rlimits"]:
            resource.setrlimit(int(res), (int(soft), int(hard)))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        time.tzset()
        random.seed()  # as a fresh interpreter's (register_at_fork does it too: said here)
        program = _program(req["argv"])
        assert program is not None
        from worker.process import set_title_text

        set_title_text(" ".join(req["argv"]))  # the spawned worker's command line in ps
        code = _run(program)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        # As an interpreter of its own ends on an uncaught ^C: the traceback, then killed by
        # SIGINT, so its parent sees the signal and not a crash (tests/supervisor/
        # test_sandbox_daemon.py::test_a_signal_to_the_client_ends_the_sandbox).
        import traceback

        traceback.print_exc()
        died_of = signal.SIGINT
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        if died_of is not None:
            signal.signal(died_of, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [died_of])
            os.kill(os.getpid(), died_of)
            code = 128 + died_of
        os._exit(code)


def _run(program: list[str]) -> int:
    import runpy

    if program[0] == "-m":
        sys.argv = [program[1], *program[2:]]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(program)
        sys.path[0:0] = [os.path.dirname(os.path.abspath(program[0]))]
        runpy.run_path(program[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
