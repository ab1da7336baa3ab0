"""Where an attempt finds its job: the copy its message carries, or the job store.

A one-shot occurrence's message carries a copy of its job (Dispatch.job_copy), so its worker does not read the job.
A change of the job since the sweep that sent the copy voids it (Ledger.void_copies): the claim made on the copy is
refused, and the attempt starts again from the store, on the job as it is now.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from scheduler.core.model.job import Job
from scheduler.core.ports import Dispatch, JobReader, Metrics

log = logging.getLogger(__name__)


class CopyVoid(Exception):
    """The claim made on a message's copy of its job was refused: the job changed since (Ledger.void_copies)."""


class JobSource(Protocol):
    #: Whether the job is the message's copy (the claim is then refused once the copy is void).
    on_copy: bool

    def job(self, dispatch: Dispatch) -> Job | None:
        """The occurrence's job, None if it does not exist."""
        ...


@dataclass(frozen=True)
class MessageCopy:
    """The copy of the job the dispatch carries: no read."""

    on_copy = True

    def job(self, dispatch: Dispatch) -> Job | None:
        return dispatch.job_copy


@dataclass(frozen=True)
class StoredJob:
    """The job as stored now: one read."""

    jobs: JobReader
    on_copy = False

    def job(self, dispatch: Dispatch) -> Job | None:
        return self.jobs.get(dispatch.job_id)


def source_of(dispatch: Dispatch, jobs: JobReader) -> JobSource:
    """The source an attempt starts from: the message's copy of the job when it carries one, else the store."""
    return MessageCopy() if dispatch.job_copy is not None else StoredJob(jobs)


def copy_voided(dispatch: Dispatch, metrics: Metrics) -> None:
    """Note that the job changed after the advance that sent `dispatch`'s copy of it."""
    metrics.count("JobCopiesVoid")
    log.info(
        "the job changed since its copy was sent: read it",
        extra={"job_id": dispatch.job_id, "occurrence_key": dispatch.key, "copy_version": dispatch.version},
    )
