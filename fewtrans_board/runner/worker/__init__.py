"""The plugin worker: where plugin code runs, apart from every process that judges.

The caller drives :class:`~.isolated.PluginWorker` with :mod:`.messages` and :mod:`.remote`;
:mod:`.serve` is the worker process (a zygote forking :mod:`.episode_process`), speaking
:mod:`.frames` on its pipes; :mod:`.memory` and :mod:`.trainable` measure, :mod:`.guard` ends
pool workers with their parent.
"""
