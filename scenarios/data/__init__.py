"""The data wing: every dataset fedclock reads or generates, and the one builder of a
:class:`~fedclock.actors.federation.Federation` (:mod:`fedclock.scenarios.data.federation`).

The registry (:mod:`fedclock.scenarios.data.dataset_specs`) is the only list of dataset
names; each shipped dataset's spec names its loader, each client-file format is a reader
class (:mod:`fedclock.scenarios.data.client_files`), and the rest of ``scenarios/`` asks
this package for a federation by a ``DatasetConfig`` alone.
"""
