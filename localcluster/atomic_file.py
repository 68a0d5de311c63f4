"""Files another process reads while they may be rewritten (a pid file, a kubeconfig): written beside their place
under a name of this process, then renamed over it, so a reader finds the old content or the new, never a part."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(dest: Path, text: str, mode: int | None = None) -> None:
    """``dest`` holds ``text`` (and ``mode``, if given) at once, for every reader."""
    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    partial.write_text(text)
    if mode is not None:
        partial.chmod(mode)
    partial.replace(dest)
