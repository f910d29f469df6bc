"""Shared fixtures. Tests start real brokers and real clients; nothing here mocks them."""
