"""Background jobs on one runner and one budget of cores: a job in a thread (``ThreadJob``) or in a spawned process
(``spawn``, core.training.training_job), one status type (``JobStatus``, which each kind extends with its progress),
one busy error (``JobBusy``), and a heartbeat that stops a job whose page has gone (core.jobs.runner)."""
from core.jobs.runner import (BACKGROUND_NICE, HEARTBEAT_ENV, Job, JobBusy, JobStatus, about, heartbeat_s, jobs,
                              running_jobs)
from core.jobs.thread import JobStopped, Progress, ThreadJob, ThreadJobStatus

__all__ = ["BACKGROUND_NICE", "HEARTBEAT_ENV", "Job", "JobBusy", "JobStatus", "JobStopped", "Progress", "ThreadJob",
           "ThreadJobStatus", "about", "heartbeat_s", "jobs", "running_jobs"]
