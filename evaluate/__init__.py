"""Evaluation: predictions -> count-first voting -> pass@K, ARC Prize submission, pictures."""
