"""The mock's stand-in for sglang's multi-node rendezvous (`--nnodes N
--dist-init-addr HOST:PORT`): the rule the real head keeps is that its HTTP
server, /health included, does not answer before every other rank has joined
torch.distributed at the head's address. The mock head listens at that address
and starts serving only once ranks 1..N-1 have each joined (a connection that
says its rank); a wrong rank or a second join of one rank is refused.

The other node's stand-in (`python -m sm12x.mock.rendezvous HOST:PORT RANK`)
joins and then holds, as a serving node does, until the head goes away.
"""

from __future__ import annotations

import socket
import sys
import time


def split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--dist-init-addr {addr!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def wait_for_ranks(addr: str, nnodes: int, say=print) -> list[socket.socket]:
    """Block until ranks 1..nnodes-1 joined; return their connections (kept open:
    closing them tells the stand-ins the head is gone)."""
    host, port = split(addr)
    listener = socket.create_server((host, port), reuse_port=False)
    missing = set(range(1, nnodes))
    say(f"sm12x mock-server: waiting for node rank(s) {sorted(missing)} at {addr}")
    joined = []
    while missing:
        conn, _ = listener.accept()
        conn.settimeout(10.0)
        try:
            line = conn.makefile("r").readline().split()
        except OSError:
            conn.close()
            continue
        rank = int(line[1]) if len(line) == 2 and line[0] == "rank" and line[1].isdigit() else -1
        if rank not in missing:
            conn.sendall(b"refused: not a rank this head waits for\n")
            conn.close()
            continue
        conn.sendall(b"ok\n")
        conn.settimeout(None)
        missing.discard(rank)
        joined.append(conn)
        say(f"sm12x mock-server: node rank {rank} joined")
    listener.close()
    return joined


def join(addr: str, rank: int, patience: float = 600.0) -> int:
    """Join the head at `addr` as `rank` (retrying while it is not listening yet),
    then hold until the head closes the connection."""
    host, port = split(addr)
    until = time.monotonic() + patience
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5.0)
            break
        except OSError as exc:
            if time.monotonic() >= until:
                print(f"rendezvous: no head at {addr}: {exc}", file=sys.stderr)
                return 1
            time.sleep(0.2)
    conn.sendall(f"rank {rank}\n".encode())
    answer = conn.makefile("r").readline().strip()
    if answer != "ok":
        print(f"rendezvous: the head refused rank {rank}: {answer}", file=sys.stderr)
        return 1
    print(f"rendezvous: joined {addr} as rank {rank}", flush=True)
    conn.settimeout(None)
    while conn.recv(1024):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(join(sys.argv[1], int(sys.argv[2])))
