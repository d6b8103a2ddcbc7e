"""Red team, host lists: "no IP addresses" is checked with ipaddress, which knows only the
dotted-quad form, while the resolver the egress proxy calls (getaddrinfo, inet_aton) also
reads `10.1`, `167772161` and `0xa000001` as 10.0.0.1. Such an entry passed as a host name,
and a listed name may reach the LAN: a gallery routine could open a LAN address while its
capability card shows a "host" nobody reads as one."""

from __future__ import annotations

import socket

import pytest

from routines.spec.checks import Bad
from routines.spec.hosts import host_problem, network_value


@pytest.mark.parametrize(
    "entry", ["10.1", "167772161", "0xa000001", "0x7f.1", "127.1:8080", "192.168.1", "012.1.1.1"]
)
def test_a_host_list_entry_the_resolver_reads_as_an_address_is_refused(entry: str) -> None:
    host = entry.partition(":")[0]
    socket.inet_aton(host)  # the premise: libc takes it for an IPv4 address
    assert host_problem(entry) == f'"{entry}" is an IP address; name the host'
    with pytest.raises(Bad):
        network_value([entry])


@pytest.mark.parametrize("entry", ["api.github.com", "1password.com", "3.example", "x0a.test"])
def test_names_with_digits_stay_host_names(entry: str) -> None:
    assert host_problem(entry) is None
