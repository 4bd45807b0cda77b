"""The database mechanism around the pure scheduling core (`service.scheduler`).

`snapshot_reader` turns rows into the core's Snapshot and writes nothing; `plan_writer`
turns a Plan into attempts and allocations; `loop` runs cycles (lock, read, place,
write), estimator refits and lease expiry on background threads; `views` holds the
placement views domains may read (GPUs as placement counts them, explain a job).
"""
