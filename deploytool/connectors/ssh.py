"""SSH hosts over fabric/paramiko. Transport exceptions become one sentence that says what to do."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import select
import socket
import threading
import time
from contextlib import suppress
from pathlib import Path

import fabric
import paramiko
from paramiko.agent import AgentRequestHandler
from paramiko.ssh_exception import NoValidConnectionsError

from ..config import HostConfig
from ..errors import ConnectError, RemoteError
from .base import Connector, RemoteProcess, Result, read_chunks, shell_command

LOST = (paramiko.SSHException, OSError, EOFError)  # what a dropped connection raises


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _StrictPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):
        raise UnknownHostKey(hostname, key)


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Trust on first use: record the key in known_hosts, then it is checked strictly."""

    def __init__(self, known_hosts: Path, on_accept):
        self.known_hosts, self.on_accept = known_hosts, on_accept

    def missing_host_key(self, client, hostname, key):
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.on_accept(hostname, key)


class _SSHProcess(RemoteProcess):
    def __init__(self, owner: "SSHConnector", chan):
        self.owner, self.chan = owner, chan
        self.out = chan.makefile("rb")
        self.err = chan.makefile_stderr("rb")

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except LOST as e:
            raise self.owner._lost(e) from None

    def _ended(self) -> bool:
        """The command ended (its exit came) while the connection lives: input it was still to
        read is dropped, as a pipe to an ended process is, and finish() says how it ended."""
        transport = self.chan.get_transport()
        return self.chan.exit_status_ready() and transport is not None and transport.is_active()

    def _send(self, fn, *args) -> bool:
        """False when the command has ended (see _ended); a lost connection is an error."""
        try:
            fn(*args)
            return True
        except LOST as e:
            if not self._ended():
                raise self.owner._lost(e) from None
            return False

    def write(self, data: bytes) -> None:
        for i in range(0, len(data), 1 << 18):
            if not self._send(self.chan.sendall, data[i : i + (1 << 18)]):
                return

    def close_stdin(self) -> None:
        self._send(self.chan.shutdown_write)

    def readline(self) -> bytes:
        return self._guard(self.out.readline)

    def finish(self) -> Result:
        if not self.chan.closed:
            with suppress(*LOST):
                self.chan.shutdown_write()
        out = self._guard(self.out.read)
        err = self._guard(self.err.read)
        code = self.chan.recv_exit_status()
        transport = self.owner._conn.transport if self.owner._conn else None
        if code == -1 and (transport is None or not transport.is_active()):
            raise self.owner._lost(EOFError("the connection closed before the command finished"))
        self.chan.close()
        return Result(code, out, err)


class SSHConnector(Connector):
    def __init__(
        self, host: HostConfig, known_hosts_base: Path, hosts: dict[str, HostConfig] | None = None
    ):
        self.host = host
        self.remote_dir = host.remote_dir
        self._base = Path(known_hosts_base)
        self._hosts = hosts or {}
        self._conn: fabric.Connection | None = None
        self._sftp = None
        self._lock = threading.Lock()
        self.accepted: list[str] = []  # host keys trusted on first use during this connection
        self.round_trips = 0  # commands and transfers sent; the deploy benchmark counts them

    # ------------------------------------------------------------------ connection

    def _known_hosts(self, h: HostConfig) -> Path:
        p = Path(os.path.expanduser(h.known_hosts or "~/.ssh/known_hosts"))
        return p if p.is_absolute() else self._base / p

    def _build(self, h: HostConfig, depth: int = 0) -> fabric.Connection:
        if depth > 4:
            raise ConnectError(f"{self.host.name}: gateway chain too long (a loop in hosts.yaml?)")
        gateway = None
        if h.gateway:
            gw_cfg = self._hosts.get(h.gateway) or HostConfig(
                name=h.gateway, host=h.gateway, host_key=h.host_key, known_hosts=h.known_hosts
            )
            gateway = self._build(gw_cfg, depth + 1)
        connect_kwargs = {}
        if h.identity_file:
            connect_kwargs["key_filename"] = [os.path.expanduser(h.identity_file)]
        conn = fabric.Connection(
            h.address,
            user=h.user,
            port=h.port,
            gateway=gateway,
            forward_agent=h.forward_agent,
            connect_timeout=h.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        known = self._known_hosts(h)
        client = conn.client
        if known.exists():
            client.load_system_host_keys(str(known))  # read-only: we never rewrite the user's file
        if h.host_key == "accept-new":
            client.set_missing_host_key_policy(
                _AcceptNewPolicy(
                    known, lambda hn, k: self.accepted.append(f"{hn} {fingerprint(k)}")
                )
            )
        else:
            client.set_missing_host_key_policy(_StrictPolicy())
        return conn

    def _where(self) -> str:
        h = self.host
        return f"{h.name} ({h.user + '@' if h.user else ''}{h.address}{':' + str(h.port) if h.port else ''})"

    def _translate(self, e: BaseException) -> ConnectError:
        h, where = self.host, self._where()
        known = self._known_hosts(h)
        if isinstance(e, UnknownHostKey):
            return ConnectError(
                f"unknown host key for {where}: {e.key.get_name()} {fingerprint(e.key)} is not in {known}; "
                f"if you trust it, set host_key: accept-new for {h.name} (or add it with "
                f"`ssh-keyscan -p {h.port or 22} {h.address} >> {known}`)"
            )
        if isinstance(e, paramiko.BadHostKeyException):
            entry = e.hostname if e.hostname else h.address
            return ConnectError(
                f"HOST KEY CHANGED for {where}: got {fingerprint(e.key)}, known_hosts has "
                f"{fingerprint(e.expected_key)}; this may be an attack. If the host was reinstalled, "
                f"run `ssh-keygen -f {known} -R '{entry}'` and connect again"
            )
        if isinstance(e, paramiko.AuthenticationException):
            key = f" with {h.identity_file}" if h.identity_file else ""
            return ConnectError(
                f"authentication failed for {where}{key}: check user and identity_file in hosts.yaml "
                f"and that the key is in the host's authorized_keys"
            )
        if isinstance(e, NoValidConnectionsError):
            return ConnectError(
                f"cannot connect to {where}: connection refused (is sshd running, is the port right?)"
            )
        if isinstance(e, socket.gaierror):
            return ConnectError(
                f"cannot resolve {where}: unknown host name (check host in hosts.yaml or ~/.ssh/config)"
            )
        if isinstance(e, (socket.timeout, TimeoutError)):
            return ConnectError(
                f"cannot connect to {where}: timed out after {h.connect_timeout}s (host down or firewalled?)"
            )
        if isinstance(e, OSError):
            return ConnectError(f"cannot connect to {where}: {e.strerror or e}")
        return ConnectError(f"SSH error with {where}: {e}")

    def _open(self) -> fabric.Connection:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            conn = self._build(self.host)
            try:
                conn.open()
            except LOST as e:
                with suppress(Exception):
                    conn.close()
                raise self._translate(e) from None
            if self.host.keepalive:
                conn.transport.set_keepalive(self.host.keepalive)
            self._conn, self._sftp = conn, None
            return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
            self._conn, self._sftp = None, None

    # ------------------------------------------------------------------ operations

    def _lost(self, e: BaseException) -> ConnectError:
        self.close()
        return ConnectError(f"connection to {self._where()} lost: {e or type(e).__name__}")

    def _exec(self, argv, cwd, env):
        """A new session running argv: the one place a command line reaches the host."""
        conn = self._open()
        self.round_trips += 1
        try:
            chan = conn.transport.open_session()
            if self.host.forward_agent:
                AgentRequestHandler(chan)
            chan.exec_command(shell_command(argv, cwd, env))
        except LOST as e:
            raise self._lost(e) from None
        return conn, chan

    def run(self, argv, *, cwd=None, env=None, stdin=None, timeout=None) -> Result:
        conn, chan = self._exec(argv, cwd, env)
        try:
            writer = None
            if stdin:
                # a thread, so a command that talks while it reads cannot deadlock us
                def feed():
                    try:
                        # fixed-size chunks: paramiko's sendall re-slices its whole argument per packet
                        reader = stdin.read if hasattr(stdin, "read") else io.BytesIO(stdin).read
                        for chunk in iter(lambda: reader(1 << 18), b""):
                            chan.sendall(chunk)
                    except LOST:
                        pass  # the main loop reports the broken channel
                    finally:
                        with suppress(*LOST):
                            chan.shutdown_write()

                writer = threading.Thread(target=feed, daemon=True)
                writer.start()
            else:
                chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout if timeout else None
            while True:
                if chan.recv_ready():
                    out += chan.recv(1 << 16)
                    continue
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                    continue
                if (
                    chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                ):
                    break
                if chan.closed and not chan.exit_status_ready():
                    raise EOFError("channel closed without an exit status")
                if deadline and time.monotonic() > deadline:
                    chan.close()
                    raise RemoteError(f"`{argv[0]} …` timed out after {timeout}s")
                select.select([chan], [], [], 0.01)  # exit-status wakes no pipe: poll briefly
            code = chan.recv_exit_status()
            if code == -1 and not conn.transport.is_active():
                raise EOFError("the connection closed before the command finished")
            if writer:
                writer.join(timeout=5)
            chan.close()
        except RemoteError:
            raise
        except LOST as e:
            raise self._lost(e) from None
        return Result(code, bytes(out), bytes(err))

    def start(self, argv, *, cwd=None, env=None) -> RemoteProcess:
        return _SSHProcess(self, self._exec(argv, cwd, env)[1])

    def _sftp_client(self):
        conn = self._open()
        if self._sftp is None:
            self._sftp = conn.sftp()
        return self._sftp

    @staticmethod
    def _sftp_path(path: str) -> str:
        # SFTP paths are relative to the login directory; `~` has no meaning there
        if path == "~":
            return "."
        return path[2:] if path.startswith("~/") else path

    def size(self, remote_path):
        self.round_trips += 1
        try:
            return self._sftp_client().stat(self._sftp_path(str(remote_path))).st_size
        except FileNotFoundError:
            raise RemoteError(f"cannot read {remote_path}: no such file") from None
        except LOST as e:
            raise self._lost(e) from None

    def read_range(self, remote_path, offset, length, chunk=1 << 20):
        self.round_trips += 1
        try:
            with self._sftp_client().open(self._sftp_path(str(remote_path)), "rb") as f:
                end = min(offset + length, f.stat().st_size)
                if end <= offset:
                    return
                f.seek(offset)
                f.prefetch(end)  # pipelined reads up to `end`: not one round trip per block
                yield from read_chunks(f, end - offset, chunk)
        except FileNotFoundError:
            raise RemoteError(f"cannot read {remote_path}: no such file") from None
        except LOST as e:
            raise self._lost(e) from None
