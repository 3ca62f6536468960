"""Batch runs over folders of images: ``saliency batch`` as a library.

* :mod:`.run` — the local run: discovery, shards, settings and resume, progress, worker pools;
* :mod:`.ray` — the same run on Ray Data actors;
* :mod:`.outputs` — per-image output names and writing (shared by ``explain`` and ``batch``), the manifest;
* :mod:`.gallery` — ``index.html`` rebuilt from the manifest;
* :mod:`.tokens` — a token explanation written into an output folder, for the gallery.
"""
