"""Measuring layers after a search, on the built-in proxy task: retraining a run's layers at fresh
seeds (`retrain`), in a larger setting on unseen data (`rerank`), the reference layers beside them
(`references`), calibrating a preset against random layers (`calibrate`), and how a proxy ranks
layers against long training (`panel`, `fidelity`). Each trains (layer x seed x setting) jobs on the
search's executor and keeps one line per finished job, so a stopped measurement resumes.
"""
