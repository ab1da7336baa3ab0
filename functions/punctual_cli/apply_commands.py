"""`punctual apply -f jobs.yaml [--dry-run] [--prune]`: make the jobs match a file (docs/jobs-as-code.md).

The file is read and every definition checked before anything is sent; then each job of the file is read by its
external id (`GET /v1/jobs/by-external-id/{owner}:{name}`) and the owner's jobs are listed by their managed-by
label; the plan (`punctual_cli.apply_plan`) is printed; and, unless `--dry-run`, carried out: creates, then updates
(`PATCH` with `If-Match`: the version the plan was made from, so a job changed since is not overwritten and each
update is a new version with the history kept), then, with `--prune`, deletes (`DELETE`: a cancel, the job stays
readable). It stops at the first refusal; applying again goes on from where the jobs then are.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from punctual_cli.apply_plan import Action, Change, Plan, plan, plan_document, plan_text
from punctual_cli.client import ApiError, Job, SchedulerClient
from punctual_cli.context import EXIT_OK, Context, problem_document
from punctual_cli.jobs_file import FileProblem, JobsFileError, read_jobs_file
from punctual_sdk.errors import NotFound

_DONE = {Action.CREATE: "created", Action.UPDATE: "updated", Action.DELETE: "deleted"}


def cmd_apply(ctx: Context) -> int:
    args = ctx.args
    try:
        jobs_file = read_jobs_file(args.file)
    except JobsFileError as refused:
        return _refuse(ctx, refused.source, [(p, refused.exit_code) for p in refused.problems])
    client = ctx.client()
    the_plan = plan(
        jobs_file,
        {job.name: _by_external_id(client, job.external_id) for job in jobs_file.jobs},
        client.iter_jobs(labels=jobs_file.selector),
        now=datetime.now(UTC),
        prune=args.prune,
        resend_secrets=args.resend_secrets,
    )
    if the_plan.problems:
        return _refuse(ctx, jobs_file.source, list(the_plan.problems))
    if args.dry_run or not the_plan.pending:
        if ctx.as_json:
            ctx.emit({**plan_document(the_plan), "dry_run": args.dry_run, "applied": False})
        else:
            ctx.say(plan_text(the_plan))
            if args.dry_run and the_plan.pending:
                ctx.say("Dry run: nothing was changed.")
        return EXIT_OK
    if not ctx.as_json:
        ctx.say(plan_text(the_plan))
        ctx.say("")
    return _carry_out(ctx, client, the_plan)


def _by_external_id(client: SchedulerClient, external_id: str) -> Job | None:
    try:
        return client.get_by_external_id(external_id)
    except NotFound:
        return None


def _carry_out(ctx: Context, client: SchedulerClient, the_plan: Plan) -> int:
    """Creates, then updates, then deletes; a line (or, with --json, a result in the plan) for each. The first
    refusal stops it: what was done is said, and the error is raised for its exit code."""
    order = (Action.CREATE, Action.UPDATE, Action.DELETE)
    results: dict[int, dict[str, Any]] = {}
    for action in order:
        for index, change in enumerate(the_plan.changes):
            if change.action is not action:
                continue
            try:
                job = _write(client, change)
            except ApiError as exc:
                results[index] = {"error": problem_document(exc)}
                _report(ctx, the_plan, results, complete=False)
                if not ctx.as_json:
                    ctx.note(f"stopped at {change.name}: {len(results) - 1} change(s) were made before it")
                    if exc.status == 412:
                        ctx.note(f"{change.name} changed since it was read; run apply again to plan from it as it is")
                raise
            results[index] = {"job_id": job.job_id, "version": job.version, "state": job.state.value}
            if not ctx.as_json:
                ctx.say(f"{_DONE[action]} {change.name}: job {job.job_id} (version {job.version}, {job.state.value})")
    _report(ctx, the_plan, results, complete=True)
    return EXIT_OK


def _write(client: SchedulerClient, change: Change) -> Job:
    if change.action is Action.CREATE:
        assert change.spec is not None
        return client.create(change.spec)
    assert change.job_id is not None
    if change.action is Action.UPDATE:
        assert change.patch is not None
        return client.update(change.job_id, change.patch, if_match=change.version)
    return client.cancel(change.job_id)


def _report(ctx: Context, the_plan: Plan, results: dict[int, dict[str, Any]], *, complete: bool) -> None:
    if ctx.as_json:
        document = plan_document(the_plan)
        for index, change in enumerate(document["changes"]):
            if index in results:
                change["result"] = results[index]
        ctx.emit({**document, "dry_run": False, "applied": complete})
        return
    if complete:
        counts = {action: the_plan.count(action) for action in Action}
        ctx.say(
            f"Apply complete: {counts[Action.CREATE]} created, {counts[Action.UPDATE]} updated, "
            f"{counts[Action.DELETE]} deleted, {counts[Action.UNCHANGED]} unchanged."
        )


def _refuse(ctx: Context, source: str, problems: list[tuple[FileProblem, int]]) -> int:
    """A file that cannot be applied: each problem with its file and line; nothing was sent."""
    if ctx.as_json:
        document = {
            "title": "Jobs file refused",
            "status": None,
            "detail": f"{source}: {problems[0][0].text(source).removeprefix(source + ':').strip()}",
            "file": source,
            "errors": [problem.document() for problem, _ in problems],
        }
        ctx.note(json.dumps(document))
    else:
        for problem, _ in problems:
            ctx.note(f"error: {problem.text(source)}")
        count = len(problems)
        ctx.note(f"{count} problem{'s' if count != 1 else ''} in {source}; nothing was changed")
    return problems[0][1]
