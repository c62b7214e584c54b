"""The plugin worker: where plugin code runs, apart from every process that judges.

The caller's face is :class:`~.isolated.PluginWorker` (start it with
:class:`~.messages.WorkerSettings`, ask it with :class:`~.messages.FitRequest`, read
:class:`~.messages.FitReply`) and :mod:`.remote` (settings, requests and replies as runner
outcomes). :mod:`.serve` is the worker process itself (a zygote that forks one isolated
episode process per request, :mod:`.episode_process`), speaking :mod:`.frames` on its pipes; :mod:`.guard`,
:mod:`.memory` and :mod:`.trainable` are what it measures and refuses inside.
"""
