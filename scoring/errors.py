"""The error every telemetry reader raises when steering must stop. Pure, no I/O."""

from __future__ import annotations


class TelemetryError(RuntimeError):
    """Telemetry could not be read, or is too old to act on; steering must stop."""
