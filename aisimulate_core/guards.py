"""Calls into providers (timing, placement, trace format, scaling) that fail as one line.

A provider comes from a plugin: when it raises something other than an ``AisimError`` or
returns a value of the wrong shape, the run stops with a ``PluginError`` naming the provider
and the distribution that ships it, instead of a traceback from inside the runtime. The
adapters keep the interface the runtime calls, so call sites do not change.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

from aisimulate_core.errors import AisimError, PluginError, TraceError
from aisimulate_core.messages import escape_controls
from aisimulate_core.plugins import BUILTINS_NAME
from aisimulate_core.registry import Provider


def call_provider(provider: Provider, what: str, function: Callable, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``; a non-AisimError exception becomes a PluginError
    ``<provider label>: <what> raised <Type>: <message>``."""
    try:
        return function(*args, **kwargs)
    except AisimError:
        raise
    except Exception as error:
        raise raised(provider, what, error) from error


def raised(provider: Provider, what: str, error: Exception) -> PluginError:
    return PluginError(escape_controls(
        f"{provider.label()}: {what} raised {type(error).__name__}: {error}"))


def malformed(provider: Provider, what: str, value: Any, expected: str) -> PluginError:
    from aisimulate_core.spec.converter import show

    shown = show(value) if isinstance(value, (int, float, str, list, tuple, dict)) or value is None \
        else f"a {type(value).__name__}"
    return PluginError(f"{provider.label()}: {what} returned {shown}, expected {expected}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# -- timing -------------------------------------------------------------------------------


def timing_model(provider: Provider, config: Any, context: Any) -> Any:
    """The provider's model for one role, built by ``from_config``; guarded unless it is one
    of the core's own (tested with the core, and called on every engine pass)."""
    model = call_provider(provider, "from_config()", provider.cls.from_config, config, context)
    if not (callable(getattr(model, "prefill_ms", None)) and callable(getattr(model, "decode_ms", None))):
        raise malformed(provider, "from_config()", model,
                        "a timing model with prefill_ms() and decode_ms()")
    if provider.plugin == BUILTINS_NAME:
        return model
    return GuardedTimingModel(model, provider)


class GuardedTimingModel:
    """A timing model whose step times are checked to be numbers (finiteness and sign are the
    step timer's rules); other attributes (``report_extras``) are the model's own."""

    __slots__ = ("model", "provider")

    def __init__(self, model: Any, provider: Provider) -> None:
        self.model = model
        self.provider = provider

    # the try blocks are inline, not through call_provider: these run once per engine pass
    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        try:
            value = self.model.prefill_ms(batch_size, mean_isl, mean_prefix)
        except AisimError:
            raise
        except Exception as error:
            raise raised(self.provider, "prefill_ms()", error) from error
        if type(value) is not float and not _is_number(value):
            raise malformed(self.provider, "prefill_ms()", value, "a number of milliseconds")
        return value

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        try:
            value = self.model.decode_ms(batch_size, active_kv_tokens, mean_context_length,
                                         total_kv_tokens)
        except AisimError:
            raise
        except Exception as error:
            raise raised(self.provider, "decode_ms()", error) from error
        if type(value) is not float and not _is_number(value):
            raise malformed(self.provider, "decode_ms()", value, "a number of milliseconds")
        return value

    def report_extras(self) -> dict:
        extras = getattr(self.model, "report_extras", None)
        if extras is None:
            return {}
        value = call_provider(self.provider, "report_extras()", extras)
        if not isinstance(value, dict):
            raise malformed(self.provider, "report_extras()", value, "a dict")
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


# -- placement ----------------------------------------------------------------------------


class GuardedPlacement:
    """A placement policy behind the runtime's interface: ``place`` and the notifications fail
    as one PluginError line; the answer's shape is checked by the runtime's router
    (``runtime/router.py``), which calls ``malformed`` for one it cannot read."""

    def __init__(self, provider: Provider, config: dict, pool: Any) -> None:
        self.provider = provider
        self.policy = call_provider(provider, "construction", provider.cls, config, pool)
        if not callable(getattr(self.policy, "place", None)):
            raise malformed(provider, "construction", self.policy, "an object with place()")

    def place(self, request: Any) -> Any:
        try:  # inline, not through call_provider: this runs once per request
            return self.policy.place(request)
        except AisimError:
            raise
        except Exception as error:
            raise raised(self.provider, "place()", error) from error

    def malformed(self, answer: Any) -> PluginError:
        return malformed(self.provider, "place()", answer,
                         "(worker_id, dp_rank) as two integers, a Placement or QUEUED")

    def notify(self, method: str, *args: Any) -> None:
        """Call the policy's ``method`` (an ``on_*`` notification) if it has one."""
        function = getattr(self.policy, method, None)
        if function is None:
            return
        try:
            function(*args)
        except AisimError:
            raise
        except Exception as error:
            raise raised(self.provider, f"{method}()", error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


# -- scaling ------------------------------------------------------------------------------


def scaling_policy(provider: Provider, config: dict) -> Any:
    policy = call_provider(provider, "construction", provider.cls, config)
    if not callable(getattr(policy, "initial_tick_ms", None)):
        raise malformed(provider, "construction", policy, "an object with initial_tick_ms()")
    return policy


def check_scaling_policy(policy: Any, label: str) -> None:
    """A policy the runtime will tick: it needs both methods of the contract."""
    missing = [name for name in ("initial_tick_ms", "on_tick")
               if not callable(getattr(policy, name, None))]
    if missing:
        raise PluginError(f"{label}: needs initial_tick_ms() and on_tick(snapshot); "
                          f"{' and '.join(f'{name}()' for name in missing)} missing on a "
                          f"{type(policy).__name__}")


# -- trace formats ------------------------------------------------------------------------


class TraceFormatLookup:
    """The trace-format registry as the workload lowering uses it (``get(name)()`` then
    ``.load(...)``): each format comes back guarded. Everything else is the registry's."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def get(self, name: str) -> Callable[[], GuardedTraceFormat]:
        provider = self._registry.provider(name)
        return lambda: GuardedTraceFormat(provider)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)


class GuardedTraceFormat:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.format = call_provider(provider, "construction", provider.cls)

    def load(self, paths, *, trace_block_size, **options):
        """``options``: the traffic fields the format declares in ``TRAFFIC_OPTIONS``."""
        # the lowering checks what comes back (a Trace or an AgenticTrace)
        try:
            return call_provider(self.provider, "load()", self.format.load, paths,
                                 trace_block_size=trace_block_size, **options)
        except PluginError as error:
            cause = error.__cause__
            if isinstance(cause, OSError) and cause.filename is not None:
                # an unreadable trace file is the input's problem, not the plugin's
                raise TraceError(escape_controls(f"{cause.filename}: cannot read the trace file: "
                                                 f"{cause.strerror or cause}")) from None
            raise
