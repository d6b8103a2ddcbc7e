"""Model providers. `anthropic` (the SDK) is imported only by `worker.providers.anthropic`,
which only a run that calls the premium model imports."""
