"""Large bodies outside Redis: the blob store interface, its file:// and S3 implementations,
and recording and reading back a body through it."""
