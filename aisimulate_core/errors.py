"""Exception hierarchy: every user-facing failure is an AisimError whose message is ready to print."""


class AisimError(Exception):
    """Base of every error the simulator reports to a user (CLI exit code 2)."""


class ConfigError(AisimError):
    """The payload breaks a rule; the message names the JSON path (`$.spec...: rule`)."""


class TraceError(AisimError):
    """A trace file is malformed; the message names the file, line and field."""


class UnknownPluginError(AisimError):
    """A provider name is not registered; the message lists the installed names."""


class PluginError(AisimError):
    """A plugin could not be loaded or registered a provider wrongly."""


class SimulationError(AisimError):
    """The simulation reached a state the model forbids (a provider bug or impossible input)."""


class NativeError(AisimError):
    """The C core (or its Python twin) returned a failure status."""


# The statuses below also keep the built-in type a caller of the core would expect, so that
# `except ValueError` in a plugin and `except AisimError` at the boundary both work.
class NativeArgumentError(NativeError, ValueError):
    """AISIM_EINVAL: a bad argument (a size out of range, a span outside the hashes)."""


class NativeMemoryError(NativeError, MemoryError):
    """AISIM_ENOMEM: the core could not allocate what it was asked for."""


class NativeEmptyError(NativeError, IndexError):
    """AISIM_EEMPTY: a pop from an empty queue."""
