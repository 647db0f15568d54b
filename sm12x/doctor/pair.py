"""The DGX Spark pair: the RDMA devices NCCL_IB_HCA names, the RoCE GID
index, the NCCL/Gloo socket interfaces and the peer on the RoCE link.

They run only where a pair applies (applies()): a multi-node recipe, a GB10,
or a peer given on the command line.
"""

from __future__ import annotations

import re
import socket

from sm12x.doctor import rdma
from sm12x.doctor.core import Context
from sm12x.errors import UserError
from sm12x.fields import HostName, parse

RDMA_TITLE = "RDMA devices"
GID_TITLE = "RoCE GID index"
PEER_TITLE = "peer reachable"
# The recipes' NCCL_IB_GID_INDEX when .env leaves it empty (recipes/dgx-spark-tp2.yaml):
# the RoCE v2 index on the public Spark deployments.
DEFAULT_GID_INDEX = 3
# Where ping is not installed the peer is probed on sshd's port instead (a
# refusal is an answer too).
SSH_PORT = 22
TCP_TIMEOUT_S = 3.0


def applies(ctx: Context) -> bool:
    """A peer is given, the recipe is multi-node, or (no recipe) a GPU is a GB10."""
    if ctx.options.peer or ctx.options.peer_report:
        return True
    if ctx.recipe is not None:
        return ctx.recipe.is_multinode
    return any(g.model == "gb10" for g in ctx.gpus)


# --- RDMA devices and the GID -----------------------------------------------------------


def check_rdma(ctx: Context) -> None:
    """ibv_devinfo lists an active port, and NCCL_IB_HCA names only active
    devices; then their GID index."""
    out = ctx.host.run(["ibv_devinfo"])
    if not out.ok:
        ctx.add(
            "rdma",
            RDMA_TITLE,
            "fail",
            f"ibv_devinfo: {out.why()}",
            "install rdma-core / ibverbs-utils (DGX OS ships them) and check the "
            "ConnectX driver (mlx5_core) is loaded",
        )
        return
    ctx.rdma_devices = rdma.parse_ibv_devinfo(out.stdout)
    active = [d.name for d in ctx.rdma_devices if d.active]
    listing = ", ".join(f"{d.name} ({device_state(d)})" for d in ctx.rdma_devices)
    if not active:
        ctx.add(
            "rdma",
            RDMA_TITLE,
            "fail",
            f"no active port: {listing or 'no device'}",
            "connect the QSFP cable between the two Sparks and bring the link up "
            "(ip link set <if> up); ibv_devinfo must show PORT_ACTIVE",
            devices=listing,
        )
        return
    wanted = rdma.split_hca_list(ctx.setting("NCCL_IB_HCA") or "")
    if not wanted:
        ctx.add(
            "rdma",
            RDMA_TITLE,
            "fail",
            f"NCCL_IB_HCA is not set; active: {', '.join(active)}",
            f"set NCCL_IB_HCA={','.join(active)} in .env",
            active=active,
        )
        return
    names = {d.name: d for d in ctx.rdma_devices}
    bad = [w for w in wanted if w not in names or not names[w].active]
    if bad:
        ctx.add(
            "rdma",
            RDMA_TITLE,
            "fail",
            f"NCCL_IB_HCA names {', '.join(bad)}, which "
            f"{'is' if len(bad) == 1 else 'are'} not active here ({listing})",
            f"set NCCL_IB_HCA={','.join(active)} in .env",
            active=active,
        )
        return
    ctx.add(
        "rdma",
        RDMA_TITLE,
        "ok",
        f"NCCL_IB_HCA {','.join(wanted)} active ({listing})",
        active=active,
    )
    check_gid(ctx, wanted)


def device_state(device: rdma.Device) -> str:
    """ "active", else the first port's state (PORT_DOWN, ...), else "no port"."""
    if device.active:
        return "active"
    return device.ports[0].state if device.ports else "no port"


def check_gid(ctx: Context, hcas: list[str]) -> None:
    """Port 1's GID at NCCL_IB_GID_INDEX is RoCE v2 on every HCA NCCL uses
    (warn when sysfs does not say)."""
    index = int(ctx.setting("NCCL_IB_GID_INDEX") or DEFAULT_GID_INDEX)
    types = {h: rdma.gid_type(ctx.host, h, 1, index) for h in hcas}
    wrong = {h: t for h, t in types.items() if t is not None and t.lower() != "roce v2"}
    unknown = [h for h, t in types.items() if t is None]
    if wrong:
        ctx.add(
            "roce-gid",
            GID_TITLE,
            "fail",
            f"GID index {index} is {', '.join(f'{h}: {t}' for h, t in wrong.items())}, not RoCE v2",
            "set NCCL_IB_GID_INDEX in .env to the index `show_gids` "
            "lists as v2 with an IPv4 address",
            index=index,
        )
    elif unknown:
        ctx.add(
            "roce-gid",
            GID_TITLE,
            "warn",
            f"cannot read GID {index} of {', '.join(unknown)}",
            "check with `show_gids` that it is RoCE v2",
            required=False,
            index=index,
        )
    else:
        value = rdma.gid_value(ctx.host, hcas[0], 1, index) or "?"
        ctx.add("roce-gid", GID_TITLE, "ok", f"index {index} is RoCE v2 ({value})", index=index)


# --- the socket interfaces ---------------------------------------------------------------


def check_interfaces(ctx: Context) -> None:
    """NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME each name an interface that
    exists and is up; the fix suggests the active RDMA devices' interfaces."""
    suggested = sorted(
        {n for d in ctx.rdma_devices if d.active for n in rdma.netdevs_of(ctx.host, d.name)}
    )
    hint = f" (on the active RDMA devices: {', '.join(suggested)})" if suggested else ""
    names = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    for name in names:
        check_interface(ctx, name, hint)
    # What the other node's --peer-report compares with (interface names differ per node).
    ctx.checks[-2].data.update(
        interfaces=[n for n in ctx.host.listdir("/sys/class/net") if n != "lo"],
        values={name: ctx.setting(name) for name in names},
    )


def first_interface(value: str) -> str:
    """The first interface of an NCCL-style list ("^=eth0,eth1" -> "eth0")."""
    return value.lstrip("^=").split(",")[0]


def check_interface(ctx: Context, name: str, hint: str) -> None:
    """One *_SOCKET_IFNAME variable: set, its first interface present and up."""
    value = ctx.setting(name)
    id = name.lower().replace("_", "-")
    if not value:
        ctx.add(
            id, name, "fail", "not set", f"set {name} in .env to the RoCE link's interface{hint}"
        )
        return
    first = first_interface(value)
    state = rdma.interface_state(ctx.host, first)
    if state is None:
        ctx.add(
            id,
            name,
            "fail",
            f"{first} does not exist here",
            f"set {name} to an existing interface{hint}",
        )
    elif state != "up":
        ctx.add(
            id,
            name,
            "fail",
            f"{first} is {state}",
            f"bring it up (sudo ip link set {first} up) and check the cable",
        )
    else:
        ctx.add(id, name, "ok", f"{first} is up")


# --- the peer ------------------------------------------------------------------------------


def peer_address(ctx: Context) -> tuple[str | None, str]:
    """The other node, validated as a host name or address: it goes to ssh
    and ping as an argument, where '-oProxyCommand=...' would be an option."""
    if ctx.options.peer:
        return parse(HostName, ctx.options.peer, "--peer"), "--peer"
    head = ctx.settings.head_addr
    if head:
        # SM12X_HEAD_ADDR may carry the dist-init port: the peer is the host.
        head = re.sub(r"^\[(.*)\](:\d+)?$|^([^:]+):\d+$", lambda m: m[1] or m[3], head)
    if head and head not in local_addresses(ctx):
        return head, "SM12X_HEAD_ADDR (this is the second node)"
    return None, (
        "this is the head node (SM12X_HEAD_ADDR is one of its addresses)"
        if head
        else "SM12X_HEAD_ADDR is not set"
    )


def local_addresses(ctx: Context) -> set[str]:
    """This machine's IPv4 and IPv6 addresses (`ip -o addr show`)."""
    out = ctx.host.run(["ip", "-o", "addr", "show"])
    return set(re.findall(r"\binet6? ([0-9a-fA-F.:]+)/", out.stdout)) if out.ok else set()


def check_peer(ctx: Context) -> None:
    """The peer answers (ping, else TCP to sshd) and is routed over
    NCCL_SOCKET_IFNAME (warn when another interface carries it)."""
    try:
        peer, how = peer_address(ctx)
    except UserError as exc:
        ctx.add(
            "peer",
            PEER_TITLE,
            "fail",
            exc.message,
            "set a host name or IP address (the other node on the RoCE link)",
        )
        return
    if peer is None:
        ctx.add(
            "peer",
            PEER_TITLE,
            "skip",
            how,
            "pass --peer ADDR (the other Spark's address on the RoCE link)",
            required=False,
        )
        return
    reachable, detail = reach(ctx, peer)
    if not reachable:
        ctx.add(
            "peer",
            PEER_TITLE,
            "fail",
            f"{peer} ({how}): {detail}",
            "check the cable, both interfaces' addresses (same subnet) and firewalls",
            peer=peer,
        )
        return
    check_route(ctx, peer, f"{peer} ({how}) {detail}")


def reach(ctx: Context, peer: str) -> tuple[bool, str]:
    """Whether the peer answers, and how: two pings, or TCP to sshd where
    ping is not installed."""
    # `--`: whatever peer is, ping reads it as the host, never as an option.
    ping = ctx.host.run(["ping", "-c", "2", "-W", "2", "--", peer], timeout=15)
    if ping.error and "not installed" in ping.error:
        return tcp_reachable(peer, SSH_PORT, TCP_TIMEOUT_S)
    return ping.ok, ("answers ping" if ping.ok else ping.why())


def check_route(ctx: Context, peer: str, found: str) -> None:
    """The peer check once it answers: ok, or warn when `ip route get` sends
    it through another interface than NCCL_SOCKET_IFNAME's."""
    route = ctx.host.run(["ip", "route", "get", peer])
    dev = re.search(r"\bdev (\S+)", route.stdout) if route.ok else None
    wanted = first_interface(ctx.setting("NCCL_SOCKET_IFNAME") or "")
    if dev and wanted and dev[1] != wanted:
        ctx.add(
            "peer",
            PEER_TITLE,
            "warn",
            f"{found}, but through {dev[1]}, not {wanted}",
            "give the RoCE interfaces addresses in their own subnet so the peer is "
            "routed over the RoCE link",
            required=False,
            peer=peer,
            route=dev[1],
        )
        return
    ctx.add("peer", PEER_TITLE, "ok", found + (f" via {dev[1]}" if dev else ""), peer=peer)


def tcp_reachable(host: str, port: int, timeout: float) -> tuple[bool, str]:
    """A TCP connection to host:port: accepted or refused both mean it answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, f"accepts TCP on port {port}"
    except ConnectionRefusedError:
        return True, f"answers (port {port} refused)"
    except OSError as exc:
        return False, f"no answer on TCP port {port} ({exc.strerror or exc})"
