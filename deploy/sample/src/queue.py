"""A job queue: jobs wait in a stream, workers read them through a consumer group."""

STREAM = "jobs"
GROUP = "workers"


def enqueue(redis, job_id, payload):
    """Adds a job to the stream; a worker of the group picks it up."""
    return redis.xadd(STREAM, {"job": job_id, "payload": payload})


def acknowledge(redis, entry_id):
    """A finished job leaves the stream: acknowledged and deleted."""
    redis.xack(STREAM, GROUP, entry_id)
    redis.xdel(STREAM, entry_id)
