"""Evaluation runner: shards of episodes, every HPE configuration, resumable Parquet output.

``spec -> plan -> run``: a :class:`~.spec.RunSpec` is resolved once into a frozen
:class:`~.plan.RunPlan`; a :class:`~.session.RunSession` made from the plan computes
(:mod:`.run` shards, resumes and writes it; :mod:`.provenance` says what defines it).
"""
