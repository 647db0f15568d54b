"""RDMA/RoCE facts for the DGX Spark pair: ibv_devinfo, sysfs, interfaces.

parse_ibv_devinfo() reads `ibv_devinfo` (rdma-core) output: a `hca_id: NAME`
line per device, its `key: value` fields indented by a tab, then per port
`port: N` and its fields (`state: PORT_ACTIVE (4)`, `link_layer: Ethernet`)
indented further (tests/fixtures/ibv_devinfo/ has whole examples).

The sysfs helpers map an RDMA device to its network interface
(/sys/class/infiniband/DEV/device/net/IF) and read a GID's type
(/sys/class/infiniband/DEV/ports/N/gid_attrs/types/INDEX: "RoCE v2").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sm12x.doctor.host import Host


@dataclass
class Port:
    number: int
    state: str  # PORT_ACTIVE, PORT_DOWN, ...
    link_layer: str | None = None

    @property
    def active(self) -> bool:
        return self.state == "PORT_ACTIVE"


@dataclass
class Device:
    name: str
    ports: list[Port] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return any(p.active for p in self.ports)


_KV = re.compile(r"^\s*([A-Za-z_][\w ]*?):\s*(.*?)\s*$")


def parse_ibv_devinfo(text: str) -> list[Device]:
    devices: list[Device] = []
    port: Port | None = None
    for raw in text.splitlines():
        match = _KV.match(raw)
        if not match:
            continue
        key, value = match[1].strip(), match[2]
        if key == "hca_id":
            devices.append(Device(value))
            port = None
        elif not devices:
            continue
        elif key == "port":
            port = Port(int(value.split()[0]) if value.split() else 0, "UNKNOWN")
            devices[-1].ports.append(port)
        elif port is not None and key == "state":
            port.state = value.split()[0]
        elif port is not None and key == "link_layer":
            port.link_layer = value
        elif port is None:
            devices[-1].fields[key] = value
    return devices


def netdevs_of(host: Host, device: str) -> list[str]:
    return host.listdir(f"/sys/class/infiniband/{device}/device/net")


def interface_state(host: Host, name: str) -> str | None:
    """operstate of a network interface ('up', 'down', ...), None if absent."""
    if not name or "/" in name:
        return None
    state = host.read(f"/sys/class/net/{name}/operstate")
    return state.strip() if state is not None else None


def gid_type(host: Host, device: str, port: int, index: int) -> str | None:
    text = host.read(f"/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}")
    return text.strip() if text is not None else None


def gid_value(host: Host, device: str, port: int, index: int) -> str | None:
    text = host.read(f"/sys/class/infiniband/{device}/ports/{port}/gids/{index}")
    return text.strip() if text is not None else None


def split_hca_list(value: str) -> list[str]:
    """NCCL_IB_HCA: 'rocep1s0f0,roceP2p1s0f0' or with ports 'mlx5_0:1'; '^' and '=' prefixes."""
    value = value.strip().lstrip("^=")
    return [part.split(":")[0].strip() for part in value.split(",") if part.strip()]
