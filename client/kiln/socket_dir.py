"""The directory the daemon's unix socket lives in, checked before the
client trusts anything in it, and the user of the process answering there.

The default socket directory, /tmp/kiln-<uid>, is in a directory every user
can write to: another user could create it first, put a fake kilnd's socket
in it and receive every tensor the client sends (and answer with whatever
it likes), or leave links where the client writes its start lock and the
daemon's log. So before it connects, starts a daemon or opens a file there,
the client opens the directory itself (O_NOFOLLOW: a symbolic link is
refused) and checks what it opened: a directory, owned by this user, closed
to everyone else (no group or other permission bits).

Everything afterwards goes through that open directory, never through its
path again: the gRPC target is /proc/self/fd/<fd>/<socket>, and the lock
and log files are opened relative to it, with O_NOFOLLOW. Renaming or
replacing the directory afterwards changes nothing the client reaches. In a
directory only this user can write to, only this user's processes (or
root) can put a socket; the client also asks the kernel who listens on it
(SO_PEERCRED on a connection of its own) and refuses a process of another
user. The gRPC channel connects through the same open directory, so it
reaches that socket or one this user put there since.
"""
from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import weakref


class UntrustedSocketError(PermissionError):
    """The socket's directory, or the process answering on the socket, is
    not this user's: the client refuses to use it."""


def _describe_mode(mode: int) -> str:
    return f"{stat.S_IMODE(mode):04o}"


def _not_yours(directory: str, owner: int) -> str:
    return (f"kiln: refusing socket directory {directory}: it belongs to uid {owner}, not to "
            f"you (uid {os.geteuid()}). Another user may have created it to pose as kilnd. "
            f"Remove it (as its owner or root), or set KILN_SOCKET to a socket in a directory "
            f"of yours")


def _checked(fd: int, directory: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedSocketError(f"kiln: socket directory {directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise UntrustedSocketError(_not_yours(directory, st.st_uid))
    if st.st_mode & 0o077:
        raise UntrustedSocketError(
            f"kiln: refusing socket directory {directory}: its mode is "
            f"{_describe_mode(st.st_mode)}, open to other users; it must be 0700 "
            f"(`chmod 700 {directory}` if you made it so)")


class SocketDir:
    """The socket's directory, open and checked (see the module docstring).

    Holds a file descriptor until close() (or until it is garbage
    collected). Not for TCP addresses.
    """

    def __init__(self, socket_path: str, create: bool = False):
        self.socket_path = socket_path
        self.directory = os.path.dirname(os.path.abspath(socket_path))
        self.socket_name = os.path.basename(socket_path)
        if create:
            os.makedirs(os.path.dirname(self.directory), exist_ok=True)
            try:
                os.mkdir(self.directory, 0o700)
            except FileExistsError:
                pass  # checked below like any other
        try:
            fd = os.open(self.directory,
                         os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except PermissionError:
            # Not even readable: not ours (or made unusable); say whose.
            owner = os.lstat(self.directory).st_uid
            if owner != os.geteuid():
                raise UntrustedSocketError(_not_yours(self.directory, owner)) from None
            raise
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(self.directory):
                raise UntrustedSocketError(
                    f"kiln: refusing socket directory {self.directory}: it is a symbolic link "
                    f"(to {os.readlink(self.directory)}), not a directory; remove it, or set "
                    f"KILN_SOCKET to a socket in a real directory of yours") from None
            if e.errno == errno.ENOTDIR:
                raise UntrustedSocketError(
                    f"kiln: socket directory {self.directory} is not a directory") from None
            raise
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)
        try:
            _checked(fd, self.directory)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def open_existing(socket_path: str) -> "SocketDir | None":
        """The checked directory of socket_path, or None if it does not exist."""
        try:
            return SocketDir(socket_path)
        except FileNotFoundError:
            return None

    @property
    def pinned_path(self) -> str:
        """The socket's path through the open directory."""
        return f"/proc/self/fd/{self.fd}/{self.socket_name}"

    @property
    def target(self) -> str:
        """The gRPC target of the socket, through the open directory."""
        return f"unix:{self.pinned_path}"

    def has_socket(self) -> bool:
        try:
            st = os.stat(self.socket_name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return stat.S_ISSOCK(st.st_mode)

    def server_credentials(self, timeout_s: float = 2.0) -> tuple[int, int, int] | None:
        """(pid, uid, gid) of the process listening on the socket, as the
        kernel reports them; None when nothing listens there. Raises
        UntrustedSocketError when that process is not this user's."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            try:
                sock.connect(self.pinned_path)
            except (FileNotFoundError, ConnectionRefusedError, socket.timeout):
                return None
            pid, uid, gid = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                      struct.calcsize("3i")))
        finally:
            sock.close()
        own = os.geteuid()
        if uid != own:
            raise UntrustedSocketError(
                f"kiln: refusing the daemon on {self.socket_path}: the process listening there "
                f"(pid {pid}) runs as uid {uid}, not as you (uid {own}); kilnd serves its own "
                f"user only, so this is not your kilnd. Stop it, or set KILN_SOCKET to a socket "
                f"of yours")
        return pid, uid, gid

    def open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        """A file in the directory, opened through it without following a
        link (ELOOP if `name` is one): for the start lock and the log."""
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UntrustedSocketError(
                    f"kiln: refusing {os.path.join(self.directory, name)}: it is a symbolic "
                    f"link; remove it") from None
            raise

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "SocketDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
