"""How one candidate schedule fared: a status and a message, never an exception."""

from __future__ import annotations

from enum import StrEnum


class TrialStatus(StrEnum):
    """How a trial ended; its values are the storage's ``db.models.TRIAL_STATUSES``, in the same order."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    #: The schedule cannot run well on the device: it spills, or its real resource use exceeds a limit.
    INVALID = "invalid"

    @property
    def is_failure(self) -> bool:
        """A status that shows a bug in a template or the toolchain, as opposed to a pruned candidate."""
        return self not in (TrialStatus.OK, TrialStatus.INVALID)
