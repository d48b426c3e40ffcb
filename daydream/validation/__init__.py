"""Validation runners for what-ifs that need more than one workload flag: several
processes (pipeline, tensor parallel, Hydra, Tessel schedules) or several models
(HFTA).  Each module exposes ``validate_rows(out_dir, profile_path, progress, repeat,
iterations)`` returning :class:`daydream.validate.ValidationRow` objects; those whose
rounds run in turns with the others' (:mod:`daydream.validation.turns`) also
``validation_rounds``, with the same arguments, a generator that yields between its
rounds and returns the rows.  See :data:`daydream.validate.RUNNERS`.
"""
