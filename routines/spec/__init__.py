"""The routine file and config.toml: the format, reading it strictly, and where things live.

    routine     the typed, immutable Routine every other package reads
    readfile    a routine file's bytes, read safely (regular, capped, non-blocking)
    loader      TOML text -> Routine, every problem naming file, key, expected, found
    checks      typed checks for TOML tables and the Problem they report
    grants      [[agent.credentials]]: a credential bound to its hosts
    hosts       the `network` key
    routekeys   the keys that name a model provider
    mcpkeys     [[agent.mcp]] and the mcp:SERVER/TOOL whitelist
    providers   config.toml's [providers] and the route each leg runs on
    config      config.toml
    registry    every routine file, user and system, and which version is in force
    never       the never-list: the places of $HOME no routine may reach
    paths       where everything lives on disk
    outputs     a run's output file name

The names below are imported on first use, so `from routines.spec import Routine` costs
routine.py alone (tests/cli/test_cli_list.py counts what a plain `list` loads). The never-list's
names (describe, expand, under...) are too generic to read well here: import them from
routines.spec.never. `paths` is the module, as ever; `routines.spec.paths.paths()` the function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from routines.spec.checks import (
        Bad as Bad,
    )
    from routines.spec.checks import (
        Problem as Problem,
    )
    from routines.spec.checks import (
        RoutineInvalid as RoutineInvalid,
    )
    from routines.spec.config import (
        DEFAULT_GALLERY_URL as DEFAULT_GALLERY_URL,
    )
    from routines.spec.config import (
        DEFAULT_OLLAMA_URL as DEFAULT_OLLAMA_URL,
    )
    from routines.spec.config import (
        Config as Config,
    )
    from routines.spec.config import (
        ConfigInvalid as ConfigInvalid,
    )
    from routines.spec.config import (
        FleetSettings as FleetSettings,
    )
    from routines.spec.config import (
        LedgerSettings as LedgerSettings,
    )
    from routines.spec.config import (
        SandboxSettings as SandboxSettings,
    )
    from routines.spec.config import (
        default_machine as default_machine,
    )
    from routines.spec.config import (
        load_config as load_config,
    )
    from routines.spec.config import (
        ollama_host_url as ollama_host_url,
    )
    from routines.spec.hosts import host_problem as host_problem
    from routines.spec.hosts import network_value as network_value
    from routines.spec.loader import (
        load_file as load_file,
    )
    from routines.spec.loader import (
        load_text as load_text,
    )
    from routines.spec.loader import (
        once_past as once_past,
    )
    from routines.spec.mcpkeys import model_tool_name as model_tool_name
    from routines.spec.outputs import (
        OUTPUT_NAME as OUTPUT_NAME,
    )
    from routines.spec.outputs import (
        output_day as output_day,
    )
    from routines.spec.outputs import (
        output_files as output_files,
    )
    from routines.spec.outputs import (
        output_name as output_name,
    )
    from routines.spec.paths import Paths as Paths
    from routines.spec.paths import signature_path as signature_path
    from routines.spec.providers import (
        BUILTIN_LOCAL as BUILTIN_LOCAL,
    )
    from routines.spec.providers import (
        BUILTIN_PREMIUM as BUILTIN_PREMIUM,
    )
    from routines.spec.providers import (
        Leg as Leg,
    )
    from routines.spec.providers import (
        ProviderKind as ProviderKind,
    )
    from routines.spec.providers import (
        ProviderSettings as ProviderSettings,
    )
    from routines.spec.providers import (
        RouteInvalid as RouteInvalid,
    )
    from routines.spec.providers import (
        RoutePlan as RoutePlan,
    )
    from routines.spec.providers import (
        Target as Target,
    )
    from routines.spec.providers import (
        from_job as from_job,
    )
    from routines.spec.providers import (
        plan_route as plan_route,
    )
    from routines.spec.providers import (
        to_job as to_job,
    )
    from routines.spec.readfile import (
        MAX_ROUTINE_FILE as MAX_ROUTINE_FILE,
    )
    from routines.spec.readfile import (
        read_routine_file as read_routine_file,
    )
    from routines.spec.registry import Entry as Entry
    from routines.spec.registry import Registry as Registry
    from routines.spec.registry import scan as scan
    from routines.spec.routine import (
        ACTION_NAME_RE as ACTION_NAME_RE,
    )
    from routines.spec.routine import (
        DEFAULT_APPROVALS_EXPIRE as DEFAULT_APPROVALS_EXPIRE,
    )
    from routines.spec.routine import (
        DEFAULT_LOCAL_MODEL as DEFAULT_LOCAL_MODEL,
    )
    from routines.spec.routine import (
        DEFAULT_PREMIUM_MODEL as DEFAULT_PREMIUM_MODEL,
    )
    from routines.spec.routine import (
        NAME_RE as NAME_RE,
    )
    from routines.spec.routine import (
        RESERVED_NAMES as RESERVED_NAMES,
    )
    from routines.spec.routine import (
        Action as Action,
    )
    from routines.spec.routine import (
        AgentSpec as AgentSpec,
    )
    from routines.spec.routine import (
        BudgetSpec as BudgetSpec,
    )
    from routines.spec.routine import (
        CommandSpec as CommandSpec,
    )
    from routines.spec.routine import (
        Credential as Credential,
    )
    from routines.spec.routine import (
        Escalation as Escalation,
    )
    from routines.spec.routine import (
        Kind as Kind,
    )
    from routines.spec.routine import (
        McpCall as McpCall,
    )
    from routines.spec.routine import (
        McpServer as McpServer,
    )
    from routines.spec.routine import (
        Memory as Memory,
    )
    from routines.spec.routine import (
        Missed as Missed,
    )
    from routines.spec.routine import (
        OnExceed as OnExceed,
    )
    from routines.spec.routine import (
        Origin as Origin,
    )
    from routines.spec.routine import (
        OutputSpec as OutputSpec,
    )
    from routines.spec.routine import (
        OutputType as OutputType,
    )
    from routines.spec.routine import (
        Permissions as Permissions,
    )
    from routines.spec.routine import (
        Route as Route,
    )
    from routines.spec.routine import (
        Routine as Routine,
    )
    from routines.spec.routine import (
        ScheduleSpec as ScheduleSpec,
    )
    from routines.spec.routine import (
        Tool as Tool,
    )
    from routines.spec.routine import (
        ToolKind as ToolKind,
    )

# Each name the package exports -> the module that defines it (imported on first use).
_EXPORTS = {
    "ACTION_NAME_RE": "routine",
    "Action": "routine",
    "AgentSpec": "routine",
    "BUILTIN_LOCAL": "providers",
    "BUILTIN_PREMIUM": "providers",
    "Bad": "checks",
    "BudgetSpec": "routine",
    "CommandSpec": "routine",
    "Config": "config",
    "ConfigInvalid": "config",
    "Credential": "routine",
    "DEFAULT_APPROVALS_EXPIRE": "routine",
    "DEFAULT_GALLERY_URL": "config",
    "DEFAULT_LOCAL_MODEL": "routine",
    "DEFAULT_OLLAMA_URL": "config",
    "DEFAULT_PREMIUM_MODEL": "routine",
    "Entry": "registry",
    "Escalation": "routine",
    "FleetSettings": "config",
    "Kind": "routine",
    "LedgerSettings": "config",
    "Leg": "providers",
    "MAX_ROUTINE_FILE": "readfile",
    "McpCall": "routine",
    "McpServer": "routine",
    "Memory": "routine",
    "Missed": "routine",
    "NAME_RE": "routine",
    "OUTPUT_NAME": "outputs",
    "OnExceed": "routine",
    "Origin": "routine",
    "OutputSpec": "routine",
    "OutputType": "routine",
    "Paths": "paths",
    "Permissions": "routine",
    "Problem": "checks",
    "ProviderKind": "providers",
    "ProviderSettings": "providers",
    "RESERVED_NAMES": "routine",
    "Registry": "registry",
    "Route": "routine",
    "RouteInvalid": "providers",
    "RoutePlan": "providers",
    "Routine": "routine",
    "RoutineInvalid": "checks",
    "SandboxSettings": "config",
    "ScheduleSpec": "routine",
    "Target": "providers",
    "Tool": "routine",
    "ToolKind": "routine",
    "default_machine": "config",
    "from_job": "providers",
    "host_problem": "hosts",
    "load_config": "config",
    "load_file": "loader",
    "load_text": "loader",
    "model_tool_name": "mcpkeys",
    "network_value": "hosts",
    "ollama_host_url": "config",
    "once_past": "loader",
    "output_day": "outputs",
    "output_files": "outputs",
    "output_name": "outputs",
    "plan_route": "providers",
    "read_routine_file": "readfile",
    "scan": "registry",
    "signature_path": "paths",
    "to_job": "providers",
}

__all__ = [
    "ACTION_NAME_RE",
    "BUILTIN_LOCAL",
    "BUILTIN_PREMIUM",
    "DEFAULT_APPROVALS_EXPIRE",
    "DEFAULT_GALLERY_URL",
    "DEFAULT_LOCAL_MODEL",
    "DEFAULT_OLLAMA_URL",
    "DEFAULT_PREMIUM_MODEL",
    "MAX_ROUTINE_FILE",
    "NAME_RE",
    "OUTPUT_NAME",
    "RESERVED_NAMES",
    "Action",
    "AgentSpec",
    "Bad",
    "BudgetSpec",
    "CommandSpec",
    "Config",
    "ConfigInvalid",
    "Credential",
    "Entry",
    "Escalation",
    "FleetSettings",
    "Kind",
    "LedgerSettings",
    "Leg",
    "McpCall",
    "McpServer",
    "Memory",
    "Missed",
    "OnExceed",
    "Origin",
    "OutputSpec",
    "OutputType",
    "Paths",
    "Permissions",
    "Problem",
    "ProviderKind",
    "ProviderSettings",
    "Registry",
    "Route",
    "RouteInvalid",
    "RoutePlan",
    "Routine",
    "RoutineInvalid",
    "SandboxSettings",
    "ScheduleSpec",
    "Target",
    "Tool",
    "ToolKind",
    "default_machine",
    "from_job",
    "host_problem",
    "load_config",
    "load_file",
    "load_text",
    "model_tool_name",
    "network_value",
    "ollama_host_url",
    "once_past",
    "output_day",
    "output_files",
    "output_name",
    "plan_route",
    "read_routine_file",
    "scan",
    "signature_path",
    "to_job",
]

if not TYPE_CHECKING:  # mypy reads the imports above; a module __getattr__ would hide typos

    def __getattr__(name: str) -> object:
        """The exported name, importing only the module that defines it (PEP 562)."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
