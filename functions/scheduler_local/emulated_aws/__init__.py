"""The real CDK app deployed into a local AWS emulator (ministack): the deploy test and `scripts/deploy --local`."""
