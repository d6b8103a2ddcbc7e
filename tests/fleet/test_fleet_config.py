"""config.toml [fleet] and [routine].machines: parsed strictly, errors naming file and key."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from routines.spec.checks import RoutineInvalid
from routines.spec.config import ConfigInvalid, FleetSettings, default_machine, load_config
from routines.spec.loader import load_text

ROUTINE = (
    '[routine]\nkind = "command"\n{extra}[schedule]\ncron = "0 9 * * *"\n[command]\nrun = "true"\n'
)


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("VINOS_FLEET_DATABASE", raising=False)
    return tmp_path / "config.toml"


def test_no_fleet_table_is_one_machine(cfg: Path) -> None:
    cfg.write_text("max_concurrent = 3\n")
    assert load_config(cfg).fleet is None


def test_fleet_from_the_file(cfg: Path) -> None:
    cfg.write_text('[fleet]\ndatabase = "postgresql://vinos@homeserver/vinos"\nmachine = "lap-1"\n')
    assert load_config(cfg).fleet == FleetSettings("postgresql://vinos@homeserver/vinos", "lap-1")


def test_the_machine_defaults_to_the_host_name(cfg: Path) -> None:
    cfg.write_text('[fleet]\ndatabase = "dbname=vinos"\n')
    fleet = load_config(cfg).fleet
    assert fleet is not None and fleet.machine == default_machine()
    assert default_machine().split("-")[0] in socket.gethostname()


def test_the_environment_gives_or_overrides_the_database(
    cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VINOS_FLEET_DATABASE", "host=/run/pg dbname=fleet")
    fleet = load_config(cfg).fleet  # no file at all: the variable alone turns the fleet on
    assert fleet is not None and fleet.database == "host=/run/pg dbname=fleet"
    cfg.write_text('[fleet]\ndatabase = "dbname=other"\nmachine = "desk"\n')
    assert load_config(cfg).fleet == FleetSettings("host=/run/pg dbname=fleet", "desk")


def test_local_when_unreachable_is_off_unless_set(cfg: Path) -> None:
    cfg.write_text('[fleet]\ndatabase = "x"\nmachine = "desk"\n')
    fleet = load_config(cfg).fleet
    assert fleet is not None and fleet.local_when_unreachable is False
    cfg.write_text('[fleet]\ndatabase = "x"\nmachine = "desk"\nlocal_when_unreachable = true\n')
    assert load_config(cfg).fleet == FleetSettings("x", "desk", local_when_unreachable=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[fleet]\nmachine = "desk"\n', "[fleet].database: expected a PostgreSQL connection"),
        ('[fleet]\ndatabase = "x"\nmachine = "my desk"\n', "[fleet].machine: expected a machine"),
        ('[fleet]\ndatabase = "x"\nmachin = "desk"\n', "machine"),  # the nearest known key
        ('[fleet]\ndatabase = ""\n', "[fleet].database: expected a non-empty string"),
        (
            '[fleet]\ndatabase = "x"\nlocal_when_unreachable = "yes"\n',
            "[fleet].local_when_unreachable: expected true or false",
        ),
    ],
)
def test_bad_fleet_settings_name_the_key(cfg: Path, text: str, message: str) -> None:
    cfg.write_text(text)
    with pytest.raises(ConfigInvalid) as info:
        load_config(cfg)
    assert "config.toml" in str(info.value) and message in str(info.value)


def test_routine_machines() -> None:
    r = load_text(ROUTINE.format(extra='machines = ["desktop", "nas"]\n'), Path("x.toml"))
    assert r.machines == ("desktop", "nas")
    assert load_text(ROUTINE.format(extra=""), Path("x.toml")).machines == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[]", "a non-empty array of machine names"),
        ('["a", "a"]', "machine names, each once"),
        ('["bad name"]', "a machine name"),
        ('"desktop"', "an array of strings"),
    ],
)
def test_bad_routine_machines(value: str, message: str) -> None:
    with pytest.raises(RoutineInvalid) as info:
        load_text(ROUTINE.format(extra=f"machines = {value}\n"), Path("x.toml"))
    assert "[routine].machines" in str(info.value) and message in str(info.value)
