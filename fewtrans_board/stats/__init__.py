"""Statistics derived from per-episode rows (never typed in by hand). scipy is the test oracle.

Import from the module that holds a name: ``intervals`` (``mean_ci``, ``MeanCI``, ``Z_95``),
``tests`` (paired t, Wilcoxon, Holm, Cohen's d), ``bootstrap`` (ranks and averages over
datasets), ``base_novel`` (harmonic means), ``bounds`` (verification sample sizes) and
``correlation``. The package itself imports nothing, so a process that needs a mean's interval
does not load scipy.stats (about a second) for it.
"""
