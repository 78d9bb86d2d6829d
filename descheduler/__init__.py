"""The descheduler (see issue: descheduler)."""
