"""The one error type of the evaluator: inputs that cannot be voted on, with a message that names
the file, row or puzzle at fault (the command line prints it without a traceback)."""


class EvaluationInputError(ValueError):
    """Raised with a message naming the file, row or puzzle at fault."""
