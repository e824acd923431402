"""The trial context: what a training function `fit(ctx)` receives (trial.py), and its parts: the epoch's clocks,
the stop rules and their limits, batches, misuse checks, what each setting applied."""
