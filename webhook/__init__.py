"""The mutating admission webhook (see issue: webhook)."""
