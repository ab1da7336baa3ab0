"""punctual: a serverless job scheduler for AWS with exactly-once effects.

`scheduler.core` is the domain (no AWS), `scheduler.adapters` implements its ports for DynamoDB, SQS and
HTTP (and in memory), and `scheduler.handlers` holds the three thin Lambda handlers.
"""
