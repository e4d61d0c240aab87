"""What any backend raises when a kernel cannot run to completion: a fault, or a time limit passed."""


class KernelRunError(RuntimeError):
    """The kernel did not run to completion (launch failure, fault, crash)."""


class KernelTimeoutError(KernelRunError):
    """The kernel ran past its time limit and was stopped."""


class BackendUnavailableError(RuntimeError):
    """The backend cannot run on this machine (no GPU, no driver); the message says why."""


class TimingUnavailableError(BackendUnavailableError):
    """The target runs programs but cannot time them (the emulator)."""
