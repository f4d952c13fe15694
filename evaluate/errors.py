"""The one error type of the evaluator: inputs that cannot be voted on, with a message that names
the file, row or puzzle at fault (the command line prints it without a traceback)."""


class EvaluationInputError(ValueError):
    """Raised with a message naming the file, row or puzzle at fault."""


def recorded_build_missing(data, record: str) -> EvaluationInputError:
    """A build path taken from a record (info.json's data_path, a vote's meta.data) that is not
    there: moved since, or a relative path of another machine. Named as that record, with --data
    as the way out."""
    return EvaluationInputError(f"{data}: no such build; it is the {record}: pass --data DIR for its place here")
