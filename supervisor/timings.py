"""The daemon's timings: how long it may sleep between ticks, wait for workers at a stop, wait
before housekeeping, keep an idle control client, and a fleet's lease and renewal periods; and
whether it runs its forkserver (the suite's in-process daemons go without: it costs ~2 s of CPU
per daemon).

Constructor arguments, never read from the environment where they are used: `main()` builds
one `Timings` and hands it down (the Daemon, its Site, the control server, housekeeping). Tests
that drive a real daemon process shorten them through ONE debug setting, `VINOS_DEBUG_TIMINGS`
(a JSON object of these fields, read by `from_debug` in `main()` alone), which also names a
file whose number of seconds is added to the wall clock (`clock_offset_file`: an NTP step, a
laptop waking, without root). A bad value is refused at start with what was found.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEBUG_ENV", "Timings", "TimingsInvalid"]

DEBUG_ENV = "VINOS_DEBUG_TIMINGS"


class TimingsInvalid(ValueError):
    """VINOS_DEBUG_TIMINGS is not a JSON object of known fields with usable values."""


@dataclass(frozen=True, slots=True)
class Timings:
    # At most this long between ticks: a sleep or a clock jump is noticed within it.
    tick_max_sec: float = 30.0
    # How long SIGTERM waits for running workers before ending them.
    stop_grace_sec: float = 30.0
    # Housekeeping lets start-up (and its first due runs) go first.
    housekeeping_delay_sec: float = 30.0
    # A control connection with no request in flight that sends nothing this long is closed.
    control_idle_sec: float = 60.0
    # A fleet's lease lasts this long past its last renewal, renewed every fleet_renew_sec
    # (supervisor/fleet/plan.py `fence` derives the worker deadline from both; its LEASE and
    # RENEW are these defaults).
    fleet_lease_sec: float = 60.0
    fleet_renew_sec: float = 15.0
    # Seconds in this file are added to the wall clock (tests step a real daemon's clock).
    clock_offset_file: Path | None = None
    # The forkserver for real workers (supervisor/engine/forkserver.py). Off, every run is spawned:
    # tests/conftest.py turns it off for the suite, tests/supervisor/daemonkit.py on again.
    forkserver: bool = True

    @classmethod
    def from_debug(cls, env: Mapping[str, str]) -> Timings:
        """The defaults, with `env[DEBUG_ENV]`'s fields over them; TimingsInvalid says what is
        wrong (the daemon refuses to start on it, never guesses)."""
        text = env.get(DEBUG_ENV)
        if not text:
            return cls()
        try:
            given = json.loads(text)
        except ValueError as exc:
            raise TimingsInvalid(f"{DEBUG_ENV}: expected a JSON object, found {text!r}") from exc
        if not isinstance(given, dict):
            raise TimingsInvalid(f"{DEBUG_ENV}: expected a JSON object, found {text!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, object] = {}
        for key, value in given.items():
            if key not in known:
                expected = ", ".join(sorted(known))
                raise TimingsInvalid(
                    f"{DEBUG_ENV}: unknown field {key!r} (expected one of {expected})"
                )
            if key == "clock_offset_file":
                if not isinstance(value, str) or not value:
                    raise TimingsInvalid(f"{DEBUG_ENV}: {key}: expected a path, found {value!r}")
                values[key] = Path(value)
                continue
            if key == "forkserver":
                if not isinstance(value, bool):
                    raise TimingsInvalid(
                        f"{DEBUG_ENV}: {key}: expected true or false, found {value!r}"
                    )
                values[key] = value
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise TimingsInvalid(
                    f"{DEBUG_ENV}: {key}: expected a number of seconds >= 0, found {value!r}"
                )
            values[key] = float(value)
        return dataclasses.replace(cls(), **values)  # type: ignore[arg-type]

    def debug_env(self) -> str:
        """This as a VINOS_DEBUG_TIMINGS value (only the fields that differ from the defaults)."""
        default = Timings()
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = str(value) if isinstance(value, Path) else value
        return json.dumps(out)
