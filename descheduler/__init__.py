"""The descheduler: evict a few well-chosen pods from GPU nodes that stay hot (planning is pure)."""
