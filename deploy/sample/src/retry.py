"""Retries of failed jobs: each attempt waits twice as long as the one before it."""

MAX_ATTEMPTS = 5
BASE_DELAY_S = 0.5


def backoff_delay(attempt):
    """The delay before retry number `attempt` (1-based), doubling each time, capped at 30 s."""
    return min(BASE_DELAY_S * 2 ** (attempt - 1), 30.0)


def should_retry(attempt, error):
    """A failed job is retried while attempts remain and its error is not permanent."""
    return attempt < MAX_ATTEMPTS and not getattr(error, "permanent", False)
