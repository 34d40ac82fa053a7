"""Learning tasks: a model's loss, per-example gradient, metric and datasets, registered as plug-ins."""
