"""Webhook certificate lifecycle."""
