"""The largest row id, which the API and the CLI refuse beyond.

Row ids are 32-bit in the database: larger numbers are refused as bad input, not passed
on to fail there.
"""

MAX_ID = 2**31 - 1
