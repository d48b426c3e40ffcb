"""Validation runners for what-ifs that need more than one workload flag: several
processes (pipeline, tensor parallel, Hydra, Tessel schedules) or several models
(HFTA).  Each module exposes ``validate_rows(out_dir, profile_path, progress, repeat)``
returning :class:`daydream.validate.ValidationRow` objects; see
:data:`daydream.validate.RUNNERS`.
"""
