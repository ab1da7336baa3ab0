"""The local stack: DynamoDB Local and ministack on 127.0.0.1, and the api, sweeper and worker handlers run
as separate processes exactly as Lambda would run them (`scripts/dev`). Not shipped to Lambda."""
