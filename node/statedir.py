"""The agent's directory: its socket and its state (the IPAM grants) live in it, so only
the agent's own user may have it."""

from __future__ import annotations

import contextlib
import os
import stat

from podnet.core.errors import ConfigError


def private_directory(path: str, field: str) -> None:
    """Make directory ``path`` with mode 0700, or take the one there once it is a
    directory of this process's user, setting its mode to 0700.

    :raises ConfigError: naming ``field``, when ``path`` is not a directory or belongs to
        another user (what that user put in it, or may still put in it through a handle
        it kept, cannot be trusted: the agent does not take it over)."""
    try:
        with contextlib.suppress(FileExistsError):  # made meanwhile, or not a directory
            os.makedirs(path, mode=0o700)
        st = os.stat(path)
    except OSError as exc:  # a file where a parent should be, read-only, ...
        raise ConfigError(field, f"{exc.filename or path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, f"{path}: Not a directory")
    me = os.geteuid()
    if st.st_uid != me:
        raise ConfigError(field, f"{path}: the directory belongs to uid {st.st_uid}, not to "
                                 f"the agent's uid {me}: remove it or give it to uid {me}")
    try:
        os.chmod(path, 0o700)
    except OSError as exc:
        raise ConfigError(field, f"{path}: {exc.strerror or exc}") from None
