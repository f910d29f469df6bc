"""Shared fixtures. Tests start real brokers and real clients; nothing here mocks them."""

from hypothesis import settings

# Hypothesis's per-example deadline is a timing assertion: on two shared cores a busy moment
# fails it with nothing wrong. Property tests check behaviour; benchmarks measure speed.
settings.register_profile("pulllog", deadline=None)
settings.load_profile("pulllog")
