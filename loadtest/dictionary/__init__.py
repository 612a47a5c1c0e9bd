"""The dictionary format-2 records are compressed with: a corpus of answers, its training and
its measure. `python -m loadtest.dictionary --help`."""
