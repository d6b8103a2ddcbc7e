"""The Starlette application: routes, templates, and the changes sent to the daemon.

Endpoints are plain functions (Starlette runs them in its thread pool): each opens the ledger
read-only for its own use, so a slow page never blocks another.
"""

from __future__ import annotations

import contextlib
import hmac
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dashboard import control, messages, spending, views
from dashboard.files import NAME, RUN_ID
from dashboard.security import Guard, Secrets
from routines.humanize import money, relative, tokens
from routines.ledger import LedgerError
from routines.ledger.api import Store, open_ledger
from routines.schedule.tz import machine_timezone
from routines.spec.config import load_config_or_default
from routines.spec.paths import Paths
from routines.spec.registry import scan

__all__ = ["Settings", "build_app"]

HERE = Path(__file__).resolve().parent
FILTERS = ("status", "trigger", "outcome")
FORMS = ("cron", "oncalendar", "every")
MAX_FORM = 4096
MAX_FIRE_FORM = 3 * 16 * 1024 + MAX_FORM  # a fire call's input, percent-encoded (INPUT_CAP)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Settings:
    paths: Paths
    launch: str  # the launch token good now (dashboard.security: one exchange, then a new one)
    port: int
    # Every page's "now" (next fires, today's cost, the 30 days charted, "in 2 h"): the wall
    # clock, or a fixed instant for the documentation's screenshots (scripts/screenshots.py).
    clock: Callable[[], datetime] = field(default=_utc_now)


def _when(value: datetime | str | None, now: datetime) -> str:
    """An instant in this machine's local time, with the date when it is not today."""
    if value is None or value == "":
        return "—"
    instant = (
        datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    )
    local = instant.astimezone()
    day = "" if local.date() == now.astimezone().date() else local.strftime("%a %d %b ")
    return f"{day}{local.strftime('%H:%M')} ({relative(instant - now)})"


def home_relative(path: object, home: str | None = None) -> str:
    """A path below the user's home as `~/...` (shorter, and the same on every machine)."""
    text = str(path)
    top = (home if home is not None else os.path.expanduser("~")).rstrip("/")
    if top and text.startswith(top + "/"):
        return "~" + text[len(top) :]
    return text


def _env(clock: Callable[[], datetime]) -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def when(value: datetime | str | None) -> str:
        return _when(value, clock())

    env.filters.update(money=money, tokens=tokens, when=when, home=home_relative)
    return env


class Pages:
    """The endpoints. Each GET opens the ledger read-only for itself; each POST asks the
    daemon."""

    def __init__(self, settings: Settings, keys: Secrets) -> None:
        self.paths = settings.paths
        self.now = settings.clock
        self.env = _env(settings.clock)
        self.csrf = keys.csrf
        # Every link and form of a page starts with the session's base path (templates:
        # `{{ base }}/cost`); `path` is the page's path below it.
        self.base = keys.base

    @contextlib.contextmanager
    def ledger(self) -> Iterator[Store | None]:
        """The ledger the CLI reads (routines/ledger/api.py open_ledger): on a fleet machine
        the fleet's, whose runs include other machines' (tests/fleet/test_fleet_dashboard.py);
        else this machine's file, read-only. None when it cannot be opened."""
        fleet = load_config_or_default(self.paths.config_file).fleet
        try:
            db = open_ledger(self.paths.ledger, fleet, read_only=True)
        except LedgerError:
            yield None
            return
        try:
            yield db
        finally:
            db.close()

    def page(self, request: Request, template: str, status: int = 200, **ctx: Any) -> Response:
        note, problem = messages.shown(request.query_params)
        body = self.env.get_template(template).render(
            csrf=self.csrf,
            base=self.base,
            path=request.url.path.removeprefix(self.base) or "/",
            note=note,
            problem=problem,
            **ctx,
        )
        return HTMLResponse(body, status_code=status)

    def missing(self, request: Request, what: str) -> Response:
        return self.page(request, "missing.html", 404, what=what)

    def daemon_status(self) -> tuple[dict[str, Any] | None, str]:
        try:
            return control.request(self.paths.control_socket, "status", timeout=5), ""
        except (control.DaemonDown, control.DaemonRefused) as exc:
            return None, str(exc)

    def home(self, request: Request) -> Response:
        status, problem = self.daemon_status()
        with self.ledger() as db:
            # The pulse first, then what the page shows: the page's script starts from it, so
            # a change after it (a run that starts as the page renders) refreshes the page,
            # never becomes its baseline (tests/dashboard/test_dashboard_pulse.py).
            at = views.pulse(db)
            data = views.overview(scan(self.paths), db, status, problem, self.now())
        template = "_live.html" if request.query_params.get("partial") else "overview.html"
        return self.page(request, template, o=data, at=at)

    def pulse(self, request: Request) -> Response:
        run_id = request.query_params.get("run", "")
        with self.ledger() as db:
            if run_id and RUN_ID.match(run_id):
                return JSONResponse({"pulse": views.run_pulse(self.paths, db, run_id)})
            return JSONResponse({"pulse": views.pulse(db)})

    def routine(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not NAME.match(name):
            return self.missing(request, f"routine {name!r}")
        q = request.query_params
        filters = {k: q.get(k, "") for k in FILTERS}
        try:
            limit = max(1, min(int(q.get("limit", "50")), 1000))
        except ValueError:
            limit = 50
        zone = ZoneInfo(machine_timezone())
        with self.ledger() as db:
            data = views.routine_page(name, scan(self.paths), db, self.now(), zone, filters, limit)
        if data is None:
            return self.missing(request, f"routine {name!r}")
        return self.page(request, "routine.html", r=data, limit=limit)

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        data = None
        if RUN_ID.match(run_id):
            with self.ledger() as db:
                at = views.run_pulse(self.paths, db, run_id)  # first, as on the overview
                data = views.run_page(self.paths, db, run_id)
        if data is None:
            return self.missing(request, f"run {run_id!r}")
        template = "_run.html" if request.query_params.get("partial") else "run.html"
        return self.page(request, template, r=data, at=at)

    def cost(self, request: Request) -> Response:
        with self.ledger() as db:
            data = None
            if db is not None:
                data = spending.cost_page(scan(self.paths), db, self.now(), machine_timezone())
        return self.page(request, "cost.html", c=data)

    def brief(self, request: Request) -> Response:
        with self.ledger() as db:
            items = []
            if db is not None:
                items = spending.brief_page(self.paths, db, self.now(), machine_timezone())
        return self.page(request, "brief.html", items=items)

    def playground(self, request: Request) -> Response:
        q = request.query_params
        form = q.get("form", "cron")
        form = form if form in FORMS else "cron"
        expr = q.get("expr", "")[:500]
        tz = q.get("tz", "")[:100] or machine_timezone()
        explained = None
        if expr.strip():
            explained = views.explain(form, expr, tz, self.now(), count=10)
        return self.page(request, "schedule.html", form=form, expr=expr, tz=tz, x=explained)

    async def _form(self, request: Request, cap: int) -> dict[str, str] | Response:
        """A POST's urlencoded form, its CSRF field checked (the Guard has checked the cookie
        and the Origin), or the refusal to answer with."""
        # Our forms are urlencoded and tiny: parsed here, without python-multipart.
        raw = await request.body()
        if len(raw) > cap:
            return HTMLResponse("413 form too large\n", status_code=413)
        form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        if not hmac.compare_digest(form.get("csrf", "").encode(), self.csrf.encode()):
            return HTMLResponse("403 forbidden: missing or wrong CSRF token\n", status_code=403)
        return form

    async def _ask(
        self, target: str, action: str, args: dict[str, Any], routine: str
    ) -> tuple[dict[str, Any] | None, Response | None]:
        """Send `action` to the daemon: its answer, or the redirect that says why not."""
        try:
            result = await run_in_threadpool(
                control.request, self.paths.control_socket, action, args
            )
        except control.DaemonDown:
            return None, self.back(target, messages.query("daemon_down", problem=True))
        except control.DaemonRefused as exc:
            code = messages.problem_code(exc.code)
            return None, self.back(target, messages.query(code, problem=True, routine=routine))
        return (result if isinstance(result, dict) else {}), None

    async def change(self, request: Request) -> Response:
        """A POST: enable, disable, run now, reload — each sent to the daemon, never done
        here."""
        # A fire call's form may carry its input (capped by the daemon: INPUT_CAP,
        # percent-encoded).
        action = request.path_params.get("action", "reload")
        form = await self._form(request, MAX_FIRE_FORM if action == "fire" else MAX_FORM)
        if isinstance(form, Response):
            return form
        target = messages.safe_next(form.get("next", "/"))
        name = request.path_params.get("name")
        if (name is not None and not NAME.match(name)) or action not in ACTIONS:
            return HTMLResponse("404 no such routine or action\n", status_code=404)
        args: dict[str, Any] = {} if action == "reload" else {"name": name}
        if action == "run":
            args["detach"] = True
        if action == "fire":  # untrusted input: the daemon caps it, the worker fences it
            args["input"] = form.get("input") or None
        result, refused = await self._ask(target, action, args, name or "")
        if refused is not None:
            return refused
        run_id = (result or {}).get("run_id", "")
        run_id = run_id if isinstance(run_id, str) else ""
        return self.back(target, messages.query(ACTIONS[action], routine=name or "", run=run_id))

    def proposal(self, request: Request) -> Response:
        """A waiting proposal whole (its input escaped as the terminal shows it), with
        Approve, which names the input shown, and Deny."""
        pid = _proposal_id(request.path_params["id"])
        found = None
        with self.ledger() as db:
            if pid is not None and db is not None:
                paused = views.paused_runs(db)
                found = views.one_waiting(scan(self.paths), db, pid, self.now(), paused)
        if found is None:
            return self.missing(request, "waiting proposal by that number")
        return self.page(request, "proposal.html", w=found)

    async def decide(self, request: Request) -> Response:
        """Approve or Deny a proposal, sent to the daemon (which starts the action, or
        records the refusal, and resumes a run paused for it)."""
        pid = _proposal_id(request.path_params["id"])
        decision = request.path_params["decision"]
        if pid is None or decision not in ("approve", "deny"):
            return HTMLResponse("404 no such proposal or decision\n", status_code=404)
        form = await self._form(request, MAX_FORM)
        if isinstance(form, Response):
            return form
        args: dict[str, Any] = {"id": pid}
        if decision == "approve":
            args["shown"] = form.get("shown", "")
        else:
            args["why"] = form.get("why", "")[:500]
        answer, refused = await self._ask(f"/proposal/{pid}", decision, args, "")
        if refused is not None:
            return refused
        routine = (answer or {}).get("routine", "")
        routine = routine if isinstance(routine, str) else ""  # shown only if a routine's name
        code = "approved" if decision == "approve" else "denied"
        return self.back("/", messages.query(code, routine=routine))

    def back(self, target: str, query: str) -> Response:
        """The redirect after a change: to `target` below the base path."""
        return RedirectResponse(f"{self.base}{target}?{query}", status_code=303)


# The action, and the code of the note shown after it (dashboard.messages.NOTES).
ACTIONS = {
    "enable": "enabled",
    "disable": "disabled",
    "run": "queued",
    "fire": "fired",
    "reload": "reloaded",
}


def _proposal_id(text: str) -> int | None:
    """A proposal's number from a path, or None (pure)."""
    return int(text) if text.isdigit() and len(text) <= 18 and int(text) > 0 else None


def build_app(settings: Settings) -> Guard:
    """The whole application behind its Guard (token, Host, CSRF, headers), with this
    start's session and CSRF secrets."""
    keys = Secrets.new()
    pages = Pages(settings, keys)
    routes = [
        Route("/", pages.home),
        Route("/api/pulse", pages.pulse),
        Route("/routine/{name}", pages.routine),
        Route("/run/{run_id}", pages.run),
        Route("/cost", pages.cost),
        Route("/brief", pages.brief),
        Route("/schedule", pages.playground),
        Route("/routine/{name}/{action}", pages.change, methods=["POST"]),
        Route("/reload", pages.change, methods=["POST"]),
        Route("/proposal/{id}", pages.proposal),
        Route("/proposal/{id}/{decision}", pages.decide, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Guard(
        Starlette(routes=routes),
        keys=keys,
        launch=settings.launch,
        token_file=settings.paths.runtime_dir / "dashboard.token",
        port=settings.port,
    )
