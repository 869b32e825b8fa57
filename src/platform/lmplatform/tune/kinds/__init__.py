"""The built-in trial kinds, one module each (the functions of `TrialImplementation`, tune/trial_spec.py); their
specs and the registry are tune/trial_kinds.py."""
