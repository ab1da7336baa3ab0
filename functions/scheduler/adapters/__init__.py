"""Adapters: the ports of `scheduler.core.ports` for DynamoDB, SQS, HTTP and other targets, and in memory."""
