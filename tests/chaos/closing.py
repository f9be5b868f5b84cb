"""The context-manager shape every harness part here shares: entering opens, leaving closes.

A part that fails half-way through opening (a namespace made, the next refused) closes what it
did open before the error goes on, so a failed build leaves nothing behind on the machine.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    def _open(self) -> None:
        """What entering does; nothing unless a part needs it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
